package edge

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	previewsqlite "github.com/warren-mesh/warren/internal/previews/sqlite"
	"github.com/warren-mesh/warren/internal/wire"
)

// Without a preview domain a production edge makes no preview URLs: as paths of its own host every preview
// would share the edge's origin, so a tenant's page at one preview could read another user's private preview
// (the victim's access cookie goes along) and set cookies for every preview. Creating one is unavailable
// and no /preview/ path is served; PathMode (warren dev) allows them, on PreviewHandler only (PathBase):
// the edge's Handler never serves a preview, so no preview's page is on the edge's origin.
func TestPathPreviewsOnlyWhenAllowed(t *testing.T) {
	store, err := previewsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "previews.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// The runner: every preview request it is sent answers with its path.
	runner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tenant page at "+r.URL.Path)
	}))
	t.Cleanup(runner.Close)
	for _, pathMode := range []bool{false, true} {
		ledger, d := regionsFixture(t)
		pvSrv := httptest.NewUnstartedServer(nil) // its address is PathBase
		t.Cleanup(pvSrv.Close)
		cfg := &PreviewConfig{Store: store, PathMode: pathMode}
		if pathMode {
			cfg.PathBase = "http://" + pvSrv.Listener.Addr().String()
		}
		e, err := New(Config{Region: "r1", Verifier: grantVerifier{}, Sandboxes: grantRunner{addr: strings.TrimPrefix(runner.URL, "http://")},
			Ledger: ledger, Directory: d, Metrics: prometheus.NewRegistry(), Previews: cfg})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		t.Cleanup(srv.Close)
		pvSrv.Config.Handler = e.PreviewHandler()
		pvSrv.Start()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/sandbox/previews", strings.NewReader(`{"port":8000,"public":true}`))
		req.Header.Set("Authorization", "Bearer alice")
		resp, body := doRead(t, req)
		var p wire.Preview
		_ = json.Unmarshal(body, &p)
		if !pathMode {
			if resp.StatusCode != http.StatusServiceUnavailable || wire.CodeOf(wire.ReadHTTPError(resp.StatusCode, body)) != wire.Unavailable {
				t.Errorf("create without a domain or path mode: %d %s, want 503 unavailable", resp.StatusCode, body)
			}
			p.Token = "8000-aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
		} else if resp.StatusCode != http.StatusCreated || p.URL != pvSrv.URL+"/preview/"+p.Token+"/" {
			t.Fatalf("create in path mode: %d %s, want 201 and a URL under %s", resp.StatusCode, body, pvSrv.URL)
		}
		// The edge's own origin serves no preview, in either mode.
		if resp, body := get(t, srv.URL+"/preview/"+p.Token+"/x"); resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), "tenant page") {
			t.Errorf("path mode %v: GET /preview/... on the edge's origin: %d %s, want 404", pathMode, resp.StatusCode, body)
		}
		resp, body = get(t, pvSrv.URL+"/preview/"+p.Token+"/x")
		if pathMode != (resp.StatusCode == http.StatusOK && string(body) == "tenant page at /v1/preview/8000/x") {
			t.Errorf("path mode %v: GET /preview/... on the preview origin: %d %s", pathMode, resp.StatusCode, body)
		}
		// The preview origin serves nothing but previews: no API, no health, no WebSocket, no playground.
		for _, c := range []struct{ method, path string }{{"GET", "/v1/regions"}, {"GET", "/v1/sandbox/previews"},
			{"POST", "/v1/sandbox/exec"}, {"GET", "/healthz"}, {"GET", "/ws"}, {"POST", "/playground/token"}, {"GET", "/metrics"}} {
			req, _ := http.NewRequest(c.method, pvSrv.URL+c.path, strings.NewReader(`{"user":"alice"}`))
			req.Header.Set("Authorization", "Bearer alice")
			req.Header.Set("Origin", pvSrv.URL)
			if resp, body := doRead(t, req); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "preview URLs only") {
				t.Errorf("%s %s on the preview origin: %d %s, want 404", c.method, c.path, resp.StatusCode, body)
			}
		}
	}
	// Path mode without an origin of its own is refused at start.
	ledger, d := regionsFixture(t)
	for _, base := range []string{"", "127.0.0.1:8081", "http://127.0.0.1:8081/preview", "ftp://127.0.0.1:8081", "http://127.0.0.1:8081/"} {
		if _, err := New(Config{Region: "r1", Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Directory: d,
			Metrics: prometheus.NewRegistry(), Previews: &PreviewConfig{Store: store, PathMode: true, PathBase: base}}); err == nil {
			t.Errorf("New accepted path mode with path base %q", base)
		}
	}
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return doRead(t, req)
}

func doRead(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// Behind a load balancer that ends TLS the edge sees plain HTTP: with PreviewConfig.Scheme "https" (the
// scheme of the region's public URL) the preview URLs it answers are https:// and the access cookie is
// Secure, though the request reached it without TLS; without it, the request's own scheme. An unknown scheme
// is refused at New.
func TestPreviewSchemeBehindTLSTermination(t *testing.T) {
	store, err := previewsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "previews.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, scheme := range []string{"", "https"} {
		ledger, d := regionsFixture(t)
		e, err := New(Config{Region: "r1", Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Directory: d,
			Metrics: prometheus.NewRegistry(), Previews: &PreviewConfig{Store: store, Domain: "preview.test", Scheme: scheme}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		// The load balancer forwards the public host, without a port, over plain HTTP.
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/sandbox/previews", strings.NewReader(`{"port":8000}`))
		req.Host = "r1.warren.test"
		req.Header.Set("Authorization", "Bearer alice")
		// The client claims the other scheme, as a load balancer's headers would: never read.
		claimed := map[string]string{"": "https", "https": "http"}[scheme]
		req.Header.Set("X-Forwarded-Proto", claimed)
		req.Header.Set("Forwarded", "proto="+claimed)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Token, URL string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		want := map[string]string{"": "http", "https": "https"}[scheme]
		if resp.StatusCode != http.StatusCreated || p.URL != want+"://"+p.Token+".preview.test/" {
			t.Fatalf("scheme %q: create %d, URL %q; want 201 and %s://<token>.preview.test/", scheme, resp.StatusCode, p.URL, want)
		}

		// Opening the private preview once with the owner's token sets the access cookie: Secure with https.
		req, _ = http.NewRequest(http.MethodGet, srv.URL+"/?token=alice", nil)
		req.Host = p.Token + ".preview.test"
		req.Header.Set("X-Forwarded-Proto", claimed)
		resp, err = noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cookies := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 || cookies[0].Secure != (want == "https") {
			t.Fatalf("scheme %q: open with ?token=: %d, cookies %+v; want 303 and one cookie, Secure %t", scheme, resp.StatusCode, cookies, want == "https")
		}
		srv.Close()
	}
	ledger, d := regionsFixture(t)
	if _, err := New(Config{Region: "r1", Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Directory: d,
		Metrics: prometheus.NewRegistry(), Previews: &PreviewConfig{Store: store, Domain: "preview.test", Scheme: "ftp"}}); err == nil {
		t.Fatal("New accepted the preview scheme ftp")
	}
}
