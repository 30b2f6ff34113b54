package edge

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/warren-mesh/warren/internal/wire"
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
	f := newPreviewFixture(t)
	host := f.create(t, false)
	var own string
	for _, c := range f.send(t, http.MethodGet, "/?token=alice", host).Cookies() {
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
		resp := f.send(t, http.MethodGet, "/", host, "Cookie", tc.cookie)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.want || (tc.want == http.StatusOK && string(body) != "RUNNER") {
			t.Errorf("Cookie %q: %d %s, want %d", tc.cookie, resp.StatusCode, body, tc.want)
		}
	}
}

// The runner takes its per-user limits from the newest grant it is sent (runner/quota.go), so a request
// that brought an old grant would set the limits back to what they were. A preview's traffic, which anyone
// may send to a public preview at any time, brings none to the runner (neither the preview's stored grant,
// made when it was created, nor one the visitor forges); the user's own sandbox API requests bring theirs.
func TestPreviewTrafficBringsNoGrant(t *testing.T) {
	f := newPreviewFixture(t)
	host := f.create(t, true)
	f.send(t, http.MethodGet, "/page", host, wire.HeaderGrant, wire.Grant{Issuer: "acme", User: "alice",
		Limits: &wire.SandboxLimits{BackgroundProcesses: -1}}.Encode())
	if got := <-f.grants; got.path != "/v1/preview/8000/page" || got.grant != "" {
		t.Errorf("a preview request reached the runner at %s with grant %q; want /v1/preview/8000/page and none", got.path, got.grant)
	}
	f.send(t, http.MethodGet, "/v1/sandbox/procs", "r1.warren.test", "Authorization", "Bearer alice")
	if got := <-f.grants; got.path != "/v1/sandbox/procs" || got.grant == "" {
		t.Errorf("a sandbox API request reached the runner at %s with grant %q; want one", got.path, got.grant)
	}
}

// A preview visitor claims to be someone else to the tenant's server through the headers a proxy or CDN in
// front of a server sets (a client address that server trusts for access rules and rate limits, the scheme
// and host it builds links from): the edge relays none of them, only its own public host and scheme.
func TestPreviewRelaysNoForwardingHeaders(t *testing.T) {
	f := newPreviewFixture(t)
	host := f.create(t, true)
	claimed := []string{"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "CF-Visitor", "X-Client-IP",
		"X-Cluster-Client-IP", "Fastly-Client-IP", "X-Original-Forwarded-For", "Forwarded", "Via",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Original-URL"}
	var headers []string
	for _, k := range claimed {
		headers = append(headers, k, "127.0.0.1")
	}
	f.send(t, http.MethodGet, "/page", host, headers...)
	got := <-f.grants
	for _, k := range claimed {
		if v := got.header.Values(k); len(v) != 0 {
			t.Errorf("the visitor's %s %q was relayed to the runner", k, v)
		}
	}
	if got.header.Get(previews.HostHeader) != host || got.header.Get(previews.ProtoHeader) != "http" {
		t.Errorf("the edge's host %q and scheme %q, want %s and http", got.header.Get(previews.HostHeader),
			got.header.Get(previews.ProtoHeader), host)
	}
}

// previewFixture is an edge with previews on preview.test whose user's runner is a server answering
// "RUNNER" and reporting each request it is sent.
// relayed is a request as the runner received it.
type relayed struct {
	path, grant string
	header      http.Header
}

type previewFixture struct {
	srv    *httptest.Server
	grants chan relayed
}

func newPreviewFixture(t *testing.T) *previewFixture {
	t.Helper()
	store, err := previewsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "previews.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := &previewFixture{grants: make(chan relayed, 16)}
	runnerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.grants <- relayed{r.URL.Path, r.Header.Get(wire.HeaderGrant), r.Header.Clone()}
		_, _ = io.WriteString(w, "RUNNER")
	}))
	t.Cleanup(runnerSrv.Close)
	ru, _ := url.Parse(runnerSrv.URL)
	ledger, d := regionsFixture(t)
	e, err := New(Config{Region: "r1", Verifier: hourVerifier{}, Sandboxes: grantRunner{addr: ru.Host}, Ledger: ledger, Directory: d,
		Metrics: prometheus.NewRegistry(), Previews: &PreviewConfig{Store: store, Domain: "preview.test"}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(e.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

// send sends a request to the edge for host, without following redirects.
func (f *previewFixture) send(t *testing.T, method, path, host string, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, nil)
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

// create makes alice a preview of port 8000 and answers its host.
func (f *previewFixture) create(t *testing.T, public bool) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/sandbox/previews", strings.NewReader(fmt.Sprintf(`{"port":8000,"public":%t}`, public)))
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	return p.Token + ".preview.test"
}
