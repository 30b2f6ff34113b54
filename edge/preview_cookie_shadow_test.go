package edge

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/previews"
	previewsqlite "github.com/warren-mesh/warren/internal/previews/sqlite"
	"github.com/warren-mesh/warren/internal/token"
)

// hourVerifier is grantVerifier with tokens valid for another hour (the access cookie lasts as long).
type hourVerifier struct{}

func (hourVerifier) Verify(_ context.Context, raw string) (*token.Claims, error) {
	return &token.Claims{Issuer: "acme", Subject: raw, ExpiresAt: time.Now().Add(time.Hour)}, nil
}

// Another tenant's preview page, under the same -preview-domain (not on the Public Suffix List), sets
// "warren_preview=junk; Domain=<preview domain>": the browser then sends it with the owner's own access
// cookie to the owner's private preview, possibly first. The owner still gets in: any access cookie of the
// request that checks admits it, and junk alone does not.
func TestPreviewAccessCookieNotShadowed(t *testing.T) {
	store, err := previewsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "previews.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	runnerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "RUNNER") }))
	t.Cleanup(runnerSrv.Close)
	ru, _ := url.Parse(runnerSrv.URL)
	ledger, d := regionsFixture(t)
	e, err := New(Config{Region: "r1", Verifier: hourVerifier{}, Sandboxes: grantRunner{addr: ru.Host}, Ledger: ledger, Directory: d,
		Metrics: prometheus.NewRegistry(), Previews: &PreviewConfig{Store: store, Domain: "preview.test"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	send := func(method, path, host string, body io.Reader, headers ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, body)
		req.Host = host
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	var p struct{ Token string }
	resp := send(http.MethodPost, "/v1/sandbox/previews", "r1.warren.test", strings.NewReader(`{"port":8000}`), "Authorization", "Bearer alice")
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	host := p.Token + ".preview.test"
	var own string
	for _, c := range send(http.MethodGet, "/?token=alice", host, nil).Cookies() {
		if c.Name == previews.Cookie {
			own = c.Value
		}
	}
	if own == "" {
		t.Fatal("no access cookie")
	}
	junk := previews.Cookie + "=4102444800.AAAA"
	for _, tc := range []struct {
		cookie string
		want   int
	}{
		{junk + "; " + previews.Cookie + "=" + own, http.StatusOK}, // the tossed one first
		{previews.Cookie + "=" + own + "; " + junk, http.StatusOK},
		{junk, http.StatusUnauthorized},
	} {
		resp := send(http.MethodGet, "/", host, nil, "Cookie", tc.cookie)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.want || (tc.want == http.StatusOK && string(body) != "RUNNER") {
			t.Errorf("Cookie %q: %d %s, want %d", tc.cookie, resp.StatusCode, body, tc.want)
		}
	}
}
