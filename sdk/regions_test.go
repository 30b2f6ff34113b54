package warren_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	warren "github.com/warren-mesh/warren/sdk"
)

// regionEdge is a fake edge whose /healthz answers after delay (the distance to its region).
func regionEdge(t *testing.T, delay *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		time.Sleep(time.Duration(delay.Load()))
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Nearest lists the regions at a seed edge, probes each and picks the fastest healthy one; a draining
// region is never chosen however near.
func TestNearestFollowsTheDelays(t *testing.T) {
	var near, far, drainingDelay atomic.Int64
	far.Store(int64(250 * time.Millisecond))
	a, b, d := regionEdge(t, &near), regionEdge(t, &far), regionEdge(t, &drainingDelay)
	list := func() warren.Regions {
		return warren.Regions{Region: "b", Regions: []warren.Region{
			{Name: "a", URL: strings.Replace(a.URL, "http", "ws", 1), Health: "ok", Edges: 1},
			{Name: "b", URL: b.URL, Health: "ok", Edges: 2},
			{Name: "d", URL: d.URL, Health: "draining", Edges: 1},
			{Name: "bad", URL: "ftp://nowhere", Health: "ok"},
		}}
	}
	seed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(list())
	}))
	t.Cleanup(seed.Close)

	c, probes, err := warren.Nearest(context.Background(), seed.URL, "tok", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(probes) != 3 {
		t.Fatalf("probed %d regions, want 3 (the one with an ftp URL dropped)", len(probes))
	}
	if c.URL() != a.URL { // listed as ws://, reached over http://
		t.Fatalf("chose %s, want a (%s): probes %+v", c.URL(), a.URL, probes)
	}
	// The regions change places: a client on a moves to b only because b is now clearly better.
	near.Store(int64(250 * time.Millisecond))
	far.Store(0)
	probes = warren.ProbeRegions(context.Background(), nil, list().Regions[:3], 3)
	if got := (warren.Hysteresis{}).Choose("a", probes); got != "b" {
		t.Fatalf("from a, with b clearly nearer: chose %q (probes %+v)", got, probes)
	}
}

func probeOf(name, health string, rtts ...time.Duration) warren.Probe {
	return warren.Probe{Region: warren.Region{Name: name, Health: health}, RTTs: rtts}
}

func TestHysteresis(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name, current, want string
		probes              []warren.Probe
	}{
		{"no current: the fastest", "", "b", []warren.Probe{probeOf("a", "ok", 50*ms), probeOf("b", "ok", 20*ms)}},
		{"better by less than the margin: stay", "a", "a", []warren.Probe{probeOf("a", "ok", 18*ms), probeOf("b", "ok", 9*ms)}},
		{"better by the margin but not below 2/3: stay", "a", "a", []warren.Probe{probeOf("a", "ok", 100*ms), probeOf("b", "ok", 80*ms)}},
		{"clearly better: move", "a", "b", []warren.Probe{probeOf("a", "ok", 100*ms), probeOf("b", "ok", 60*ms)}},
		{"current draining: leave it", "a", "b", []warren.Probe{probeOf("a", "draining", 1*ms), probeOf("b", "ok", 90*ms)}},
		{"current unanswered: move", "a", "b", []warren.Probe{probeOf("a", "ok"), probeOf("b", "ok", 90*ms)}},
		{"median, not the best probe", "", "b", []warren.Probe{probeOf("a", "ok", 1*ms, 90*ms, 95*ms), probeOf("b", "ok", 30*ms, 31*ms, 32*ms)}},
		{"nothing healthy", "a", "", []warren.Probe{probeOf("a", "draining", 1*ms)}},
	} {
		if got := (warren.Hysteresis{}).Choose(tc.current, tc.probes); got != tc.want {
			t.Errorf("%s: chose %q, want %q", tc.name, got, tc.want)
		}
	}
}

func FuzzParseRegions(f *testing.F) {
	f.Add([]byte(`{"region":"a","regions":[{"name":"a","url":"wss://a.example.com","health":"ok","edges":2}]}`))
	f.Add([]byte(`{"regions":[{"name":"","url":"http://x"},{"name":"b","url":"::"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := warren.ParseRegions(b)
		if err != nil {
			return
		}
		if len(r.Regions) > 256 {
			t.Fatalf("%d regions accepted", len(r.Regions))
		}
		for _, g := range r.Regions {
			if g.Name == "" || !(strings.HasPrefix(g.URL, "http") || strings.HasPrefix(g.URL, "ws")) {
				t.Fatalf("kept %+v", g)
			}
		}
	})
}

// A seed reached over TLS never sends the token to a region listed with a plain-text URL.
func TestNearestKeepsTLS(t *testing.T) {
	var none atomic.Int64
	plain := regionEdge(t, &none)
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/regions" {
			_ = json.NewEncoder(w).Encode(warren.Regions{Regions: []warren.Region{{Name: "plain", URL: plain.URL, Health: "ok"}}})
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(secure.Close)
	_, probes, err := warren.Nearest(context.Background(), secure.URL, "tok", 1, warren.WithHTTPClient(secure.Client()))
	if err == nil || len(probes) != 0 {
		t.Fatalf("Nearest from a TLS seed chose among plain-text regions: %d probes, %v", len(probes), err)
	}
}
