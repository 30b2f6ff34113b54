package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// warren regions prints every listed region with its health and round trip, marking the one the SDK
// would choose: the nearer healthy region, not the draining one.
func TestRegionsCommand(t *testing.T) {
	edge := func(delay time.Duration) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(delay)
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		}))
		t.Cleanup(s.Close)
		return s
	}
	near, far, draining := edge(0), edge(200*time.Millisecond), edge(0)
	seed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/regions" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"region": "far", "regions": []map[string]any{
			{"name": "far", "url": far.URL, "health": "ok", "edges": 1},
			{"name": "near", "url": near.URL, "health": "ok", "edges": 2},
			{"name": "leaving", "url": draining.URL, "health": "draining", "edges": 1},
		}})
	}))
	t.Cleanup(seed.Close)
	var out, errb bytes.Buffer
	if err := runRegions(context.Background(), []string{"-url", seed.URL, "-probes", "2"}, &out, &errb); err != nil {
		t.Fatalf("warren regions: %v\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, l := range lines[1:] {
		name := strings.Fields(l)[0]
		chosen := strings.Contains(l, " * ") || strings.HasPrefix(strings.Fields(l)[1], "*")
		if chosen != (name == "near") {
			t.Errorf("line %q: chosen=%v, want only near chosen", l, chosen)
		}
	}
	if !strings.Contains(out.String(), "draining") {
		t.Errorf("the draining region's health is not shown:\n%s", out.String())
	}
}
