package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const benchRequest = "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"

// benchServers serves, in the internet namespace, an echo on port 7 and a sink on port 9 (reads to EOF,
// then writes the count).
func (l *lab) benchServers(tb testing.TB) {
	serve := func(port int, h func(net.Conn)) {
		ln := listenTCP(tb, l.internet, "tcp4", fmt.Sprintf("%s:%d", pubWeb, port))
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); h(c) }()
			}
		}()
	}
	serve(7, func(c net.Conn) { _, _ = io.Copy(c, c) })
	serve(9, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "%d\n", n)
	})
}

// BenchmarkGateway compares a connection from the sandbox through the gateway with one from a sandbox
// that bypasses it (the router forwards it), interleaved in every iteration so that the load of a shared
// machine weighs on both alike: set-up (connect, an HTTP request out, its echo back) and a bulk upload of
// 1 MiB a write. It reports each path's time and the gateway's added set-up time and lost throughput.
// Issue #26's goal: at most 1 ms more a set-up, at most 5% less throughput.
func BenchmarkGateway(b *testing.B) {
	l := newLab(b, `{"mode":"allowlist","allow":[{"domain":"allowed.test"}]}`)
	l.benchServers(b)
	l.query("allowed.test", dns.TypeA)
	direct, gateway := dialer(l.direct), dialer(l.sandbox)
	b.Run("setup", func(b *testing.B) {
		var d, g time.Duration
		for b.Loop() {
			d += timed(b, func() { setup(b, direct) })
			g += timed(b, func() { setup(b, gateway) })
		}
		n := float64(b.N)
		b.ReportMetric(float64(d.Microseconds())/n, "direct-µs/op")
		b.ReportMetric(float64(g.Microseconds())/n, "gateway-µs/op")
		b.ReportMetric(float64((g-d).Microseconds())/n, "added-µs/op")
	})
	b.Run("bulk", func(b *testing.B) {
		chunk := make([]byte, 1<<20)
		dc, gc := upload(b, direct), upload(b, gateway)
		var d, g time.Duration
		write := func(c net.Conn) {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			d += timed(b, func() { write(dc) })
			g += timed(b, func() { write(gc) })
		}
		// Everything arrived: the sink's count comes after EOF.
		d += timed(b, func() { finish(b, dc) })
		g += timed(b, func() { finish(b, gc) })
		mb := float64(b.N) * float64(len(chunk)) / 1e6
		b.ReportMetric(mb/d.Seconds(), "direct-MB/s")
		b.ReportMetric(mb/g.Seconds(), "gateway-MB/s")
		b.ReportMetric(100*(1-d.Seconds()/g.Seconds()), "lost-%")
	})
}

func timed(b *testing.B, f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// setup connects to the echo server, sends an HTTP request and reads its echo (as the gateway wrote it
// again: to the head's end).
func setup(b *testing.B, dial Dialer) {
	c, err := dial(context.Background(), "tcp", pubWeb+":7")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, benchRequest); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(c)
	for line := ""; line != "\r\n"; {
		if line, err = br.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
	}
}

// upload opens a connection to the sink, opening with a line that is not HTTP (relayed as it comes).
func upload(b *testing.B, dial Dialer) net.Conn {
	c, err := dial(context.Background(), "tcp", pubWeb+":9")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "BULK upload\n"); err != nil {
		b.Fatal(err)
	}
	return c
}

func finish(b *testing.B, c net.Conn) {
	_ = c.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadAll(c); err != nil {
		b.Fatal(err)
	}
}
