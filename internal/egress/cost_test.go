package egress

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"testing"
)

// TestGatewayIdleCost: an idle sandbox's gateway (its listeners, resolver and goroutines) costs the runner
// well under issue #26's 1 MiB. Measured over 50 gateways on loopback, heap and stacks together.
func TestGatewayIdleCost(t *testing.T) {
	const n = 50
	inUse := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc + m.StackInuse
	}
	before := inUse()
	gws := make([]*Gateway, 0, n)
	for range n {
		listen := func(network string) net.Listener {
			ln, err := net.Listen(network, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return ln
		}
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gw, err := New(Config{
			Sandbox: "sb", User: "u", Stack: NewStack(HardDeny{}, nil, nil),
			Proxy: []*net.TCPListener{listen("tcp4").(*net.TCPListener)},
			DNS:   pc, DNSTCP: listen("tcp4"),
			Upstream: netip.MustParseAddrPort("127.0.0.1:53"),
		})
		if err != nil {
			t.Fatal(err)
		}
		gws = append(gws, gw)
	}
	per := (int64(inUse()) - int64(before)) / n
	for _, gw := range gws {
		if err := gw.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("an idle gateway: %d bytes", per)
	if per > 256<<10 {
		t.Fatalf("an idle gateway costs %d bytes, want at most 256 KiB", per)
	}
}
