package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// FuzzResolve: whatever message the sandbox sends its resolver, the reply is a reply to it (or a
// refusal), nothing is asked upstream but A and AAAA of an allowed, bounded name, and nothing panics.
func FuzzResolve(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"allowed.test.", dns.TypeA}, {"x.other.test.", dns.TypeTXT}, {"allowed.test.", dns.TypeAAAA}} {
		m := new(dns.Msg).SetQuestion(q.name, q.qtype)
		b, _ := m.Pack()
		f.Add(b)
	}
	var asked []string
	p, err := Parse([]byte(`{"mode":"allowlist","allow":[{"domain":"*.allowed.test"},{"domain":"allowed.test"}]}`))
	if err != nil {
		f.Fatal(err)
	}
	cfg := Config{
		Stack: NewStack(HardDeny{}, p, nil), DNS: &net.UDPConn{}, Upstream: netip.MustParseAddrPort("127.0.0.1:53"),
		QueryRate: 1e9, QueryBurst: 1 << 30,
	}
	if err := cfg.defaults(); err != nil {
		f.Fatal(err)
	}
	g := newGateway(cfg)
	defer g.cancel()
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(dns.Msg)
		if req.Unpack(b) != nil {
			return
		}
		asked = asked[:0]
		g.cfg.Dial = func(_ context.Context, _, _ string) (net.Conn, error) {
			asked = append(asked, req.Question[0].Name)
			return nil, errors.New("no upstream in this test")
		}
		reply, rec := g.resolve(req)
		if reply.Id != req.Id || !reply.Response {
			t.Fatalf("reply %d to query %d", reply.Id, req.Id)
		}
		if len(asked) > 0 {
			q := req.Question[0]
			name, ok := NormalName(q.Name)
			if !ok || len(name) > g.cfg.MaxName || (q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA) || !g.Stack().Decide(Request{Name: name}).Allowed {
				t.Fatalf("asked upstream for %q type %d", q.Name, q.Qtype)
			}
		}
		if rec.Verdict == Failed && len(asked) == 0 {
			t.Fatal("failed upstream without asking it")
		}
	})
}
