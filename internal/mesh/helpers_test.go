package mesh

import (
	"context"
	"crypto/tls"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The regions of the test mesh.
const (
	regionEU = "eu"
	regionUS = "us"
	regionAP = "ap" // known, but no node of the tests runs it
)

func known(r string) bool { return r == regionEU || r == regionUS || r == regionAP }

// testCA is a dev CA in a temporary directory.
func testCA(t testing.TB) *CA {
	t.Helper()
	ca, err := DevCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// testNode is a node and the registry its metrics are on.
type testNode struct {
	*Node
	reg  *prometheus.Registry
	addr string // where it listens, if it does
}

// newNode makes a node of region with a certificate of ca and ca as its roots (unless ca is nil or edit changes
// them), closed when t ends.
func newNode(t testing.TB, ca *CA, region string, handler func(context.Context, string, *Stream), edit ...func(*Config)) *testNode {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{
		Region:       region,
		KnownRegions: known,
		Handler:      handler,
		Logger:       testLogger(t),
		Metrics:      reg,
		DialAddr:     "127.0.0.1:0",
	}
	if ca != nil {
		cfg.Certificate, cfg.Roots = ca.Source(region), ca.Roots()
	}
	for _, e := range edit {
		e(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Close(ctx); err != nil {
			t.Errorf("close %s: %v", region, err)
		}
	})
	return &testNode{Node: n, reg: reg}
}

// listen makes n listen on addr (127.0.0.1:0 when ""), until it is closed.
func (n *testNode) listen(t testing.TB, addr string) string {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	a, err := n.Listen(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	n.addr = a.String()
	return n.addr
}

// metric is the value of the metric name with exactly labels (a sum over the other labels when partial is
// set), 0 when there is none.
func (n *testNode) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// otherCert is a certificate for region from a CA the tests' nodes do not trust.
func otherCert(t testing.TB, region string) func() (*tls.Certificate, error) {
	t.Helper()
	c, err := testCA(t).Leaf(region)
	if err != nil {
		t.Fatal(err)
	}
	return func() (*tls.Certificate, error) { return c, nil }
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testLogger logs to t's output, shown when the test fails or runs with -v.
func testLogger(t testing.TB) *slog.Logger {
	if _, ok := t.(*testing.B); ok {
		return slog.New(slog.DiscardHandler) // benchmarks print their figures only
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// pair is an eu node serving handler on loopback and a us node to open streams to it, with certificates of
// one CA; edit applies to both.
func pair(t testing.TB, handler func(context.Context, string, *Stream), edit ...func(*Config)) (ca *CA, eu, us *testNode) {
	t.Helper()
	ca = testCA(t)
	eu = newNode(t, ca, regionEU, handler, edit...)
	eu.listen(t, "")
	us = newNode(t, ca, regionUS, nil, edit...)
	return ca, eu, us
}

// open opens a stream of kind from n to eu, closed when t ends.
func (n *testNode) open(t testing.TB, eu *testNode, kind Kind) *Stream {
	t.Helper()
	s, err := n.Open(testCtx(t), regionEU, eu.addr, Header{Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
