package edge

import (
	"context"
	"encoding/json"
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
// and no /preview/ path is served; PathMode (warren dev) allows them.
func TestPathPreviewsOnlyWhenAllowed(t *testing.T) {
	store, err := previewsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "previews.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, pathMode := range []bool{false, true} {
		ledger, d := regionsFixture(t)
		e, err := New(Config{Region: "r1", Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Directory: d,
			Metrics: prometheus.NewRegistry(), Previews: &PreviewConfig{Store: store, PathMode: pathMode}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/sandbox/previews", strings.NewReader(`{"port":8000}`))
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Code wire.Code }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if !pathMode && (resp.StatusCode != http.StatusServiceUnavailable || body.Code != wire.Unavailable) {
			t.Errorf("create without a domain or path mode: %d %q, want 503 unavailable", resp.StatusCode, body.Code)
		}
		if pathMode && body.Code == wire.Unavailable {
			t.Errorf("create in path mode: %d %q", resp.StatusCode, body.Code)
		}
		resp, err = http.Get(srv.URL + "/preview/aaaa-bbbb-cccc/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !pathMode && resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /preview/... without path mode: %d %q, want 404", resp.StatusCode, body.Code)
		}
		srv.Close()
	}
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
