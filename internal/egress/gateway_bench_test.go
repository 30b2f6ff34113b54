package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/miekg/dns"
)

const benchRequest = "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"

// benchServers serves, in the internet namespace, an echo on port 7 and a sink on port 9 (reads to EOF,
// then writes the count).
func (l *lab) benchServers(b *testing.B) {
	serve := func(port int, h func(net.Conn)) {
		ln := listenTCP(b, l.internet, "tcp4", fmt.Sprintf("%s:%d", pubWeb, port))
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

// BenchmarkGateway compares, in the same run, a connection from the sandbox through the gateway with one
// from a sandbox that bypasses it (the router forwards it): set-up (connect, an HTTP request line out,
// its echo back) and a bulk transfer up. Issue #26's goal: ≤ 1 ms more per set-up, ≤ 5% less throughput.
func BenchmarkGateway(b *testing.B) {
	l := newLab(b, `{"mode":"allowlist","allow":[{"domain":"allowed.test"}]}`)
	l.benchServers(b)
	l.query("allowed.test", dns.TypeA)
	for _, path := range []struct{ name, ns string }{{"direct", l.direct}, {"gateway", l.sandbox}} {
		dial := dialer(path.ns)
		b.Run("setup/"+path.name, func(b *testing.B) {
			for b.Loop() {
				c, err := dial(context.Background(), "tcp", pubWeb+":7")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.WriteString(c, benchRequest); err != nil {
					b.Fatal(err)
				}
				// The gateway writes the request again in net/http's framing: read to the head's end.
				br := bufio.NewReader(c)
				for line := ""; line != "\r\n"; {
					if line, err = br.ReadString('\n'); err != nil {
						b.Fatal(err)
					}
				}
				c.Close()
			}
		})
		b.Run("bulk/"+path.name, func(b *testing.B) {
			chunk := make([]byte, 1<<20)
			c, err := dial(context.Background(), "tcp", pubWeb+":9")
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "BULK upload\n"); err != nil { // not HTTP: relayed as it comes
				b.Fatal(err)
			}
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			// Everything arrived before the clock stops: the sink's count comes after EOF.
			_ = c.(*net.TCPConn).CloseWrite()
			if _, err := io.ReadAll(c); err != nil {
				b.Fatal(err)
			}
		})
	}
}
