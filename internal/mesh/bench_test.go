package mesh

import (
	"io"
	"net"
	"testing"
)

// echoMsg is the message the echo benchmarks send back and forth: a small request, like a ping.
const echoMsg = 64

// benchEcho measures the round trip of a small message over rw, whose other end echoes.
func benchEcho(b *testing.B, rw io.ReadWriter) {
	msg, buf := make([]byte, echoMsg), make([]byte, echoMsg)
	b.ReportAllocs()
	b.SetBytes(2 * echoMsg)
	for b.Loop() {
		if _, err := rw.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rw, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMeshEcho: one round trip of a small message over one mesh stream on loopback (the stream is
// opened once, outside the timing).
func BenchmarkMeshEcho(b *testing.B) {
	_, eu, us := pair(b, echo)
	benchEcho(b, us.open(b, eu, KindWebSocket))
}

// BenchmarkMeshOpen: opening a stream on an established connection, header acknowledged, and closing it.
func BenchmarkMeshOpen(b *testing.B) {
	_, eu, us := pair(b, echo)
	ctx := testCtx(b)
	h := Header{Kind: KindHTTP, RequestID: "req", Issuer: "acme", User: "user", Epoch: 1}
	b.ReportAllocs()
	for b.Loop() {
		s, err := us.Open(ctx, regionEU, eu.addr, h)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkTCPEcho is the floor for BenchmarkMeshEcho: the same round trip over a plain loopback TCP
// connection, no TLS.
func BenchmarkTCPEcho(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchEcho(b, c)
}
