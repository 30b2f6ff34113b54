package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/regions"
	regionsqlite "github.com/warren-mesh/warren/internal/regions/sqlite"
)

// regionsFixture is a ledger and a region directory in a test's temporary directory.
func regionsFixture(t *testing.T) (*billingsqlite.Ledger, *regionsqlite.Directory) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	ledger, err := billingsqlite.New(ctx, billingsqlite.Config{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	d, err := regionsqlite.New(ctx, regionsqlite.Config{Path: filepath.Join(dir, "placements.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return ledger, d
}

// GET /v1/regions lists every region with announced edges and its health, this edge's region always
// included, and is refused with unavailable when the directory cannot be read.
func TestRegions(t *testing.T) {
	ctx := context.Background()
	ledger, d := regionsFixture(t)
	get := func(cfg Config) (int, map[string]json.RawMessage) {
		t.Helper()
		cfg.Verifier, cfg.Sandboxes, cfg.Ledger, cfg.Metrics = grantVerifier{}, grantRunner{}, ledger, prometheus.NewRegistry()
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/v1/regions")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	statuses := func(body map[string]json.RawMessage) []regions.Status {
		var s []regions.Status
		if err := json.Unmarshal(body["regions"], &s); err != nil {
			t.Fatalf("regions: %v in %s", err, body["regions"])
		}
		return s
	}

	code, body := get(Config{Region: "eu"})
	if s := statuses(body); code != http.StatusOK || len(s) != 1 || s[0].Name != "eu" || s[0].Health != "ok" {
		t.Fatalf("without a directory: %d %+v, want eu alone", code, s)
	}
	for _, e := range []regions.Edge{
		{Region: "us", ID: "1", URL: "wss://us.example.com"},
		{Region: "ap", ID: "1", URL: "wss://ap.example.com", Draining: true},
		{Region: "eu", ID: "1", URL: "wss://eu.example.com", WebTransport: "https://eu.example.com/wt"},
	} {
		if err := d.Announce(ctx, e, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	code, body = get(Config{Region: "eu", Directory: d})
	s := statuses(body)
	if code != http.StatusOK || string(body["region"]) != `"eu"` || len(s) != 3 {
		t.Fatalf("with a directory: %d %s", code, body)
	}
	if s[0].Name != "ap" || s[0].Health != "draining" || s[1].WebTransport != "https://eu.example.com/wt" || s[2].URL != "wss://us.example.com" {
		t.Fatalf("regions %+v", s)
	}
	code, body = get(Config{Region: "sa", Directory: d})
	if s := statuses(body); code != http.StatusOK || len(s) != 4 || s[2].Name != "sa" {
		t.Fatalf("this edge's region not yet announced: %d %+v, want it listed", code, s)
	}
	// One edge answers from its cache: the directory read once serves the next requests, even once the
	// directory is gone (its entries have not expired).
	e, err := New(Config{Region: "eu", Directory: d, Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	for i := range 3 {
		resp, err := http.Get(srv.URL + "/v1/regions")
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if s := statuses(body); resp.StatusCode != http.StatusOK || len(s) != 3 {
			t.Fatalf("request %d through one edge: %d %+v", i, resp.StatusCode, s)
		}
		if i == 0 {
			d.Close()
		}
	}
	if code, body = get(Config{Region: "eu", Directory: d}); code != http.StatusServiceUnavailable {
		t.Fatalf("directory closed, nothing cached: %d %s, want 503", code, body)
	}
}

// slowDirectory is a directory whose reads wait for release (a slow database).
type slowDirectory struct {
	regions.Directory
	entered chan struct{}
	release chan struct{}
}

func (d *slowDirectory) Edges(ctx context.Context) ([]regions.Edge, error) {
	d.entered <- struct{}{}
	<-d.release
	return d.Directory.Edges(ctx)
}

// While one read of a slow directory is under way, other callers (forwarding, the mesh's handshakes,
// /v1/regions) get the last list at once instead of queueing behind it.
func TestPeersDoNotQueueBehindASlowRead(t *testing.T) {
	ctx := context.Background()
	d, err := regionsqlite.New(ctx, regionsqlite.Config{Path: filepath.Join(t.TempDir(), "placements.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Announce(ctx, regions.Edge{Region: "us", ID: "1", URL: "wss://us.example.com"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	slow := &slowDirectory{Directory: d, entered: make(chan struct{}, 1), release: make(chan struct{})}
	p := &peers{dir: slow, self: "eu"}
	go func() { <-slow.entered; close(slow.release) }() // the first read is quick
	if edges, err := p.list(ctx, 0); err != nil || len(edges) != 1 {
		t.Fatalf("first read: %v, %v", edges, err)
	}
	slow.release = make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); _, _ = p.list(ctx, 0) }() // a second read that hangs
	<-slow.entered
	for range 100 {
		edges, _ := p.list(ctx, 0)
		if len(edges) != 1 || !p.known("us") {
			t.Fatalf("while a read hangs: %v, known(us)=%v; want the last list at once", edges, p.known("us"))
		}
	}
	close(slow.release)
	<-done
}
