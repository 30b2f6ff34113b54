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

	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// oneTokenVerifier accepts the token "good" only, as user alice of acme.
type oneTokenVerifier struct{}

func (oneTokenVerifier) Verify(_ context.Context, raw string) (*token.Claims, error) {
	if raw != "good" {
		return nil, wire.Errorf(wire.Unauthenticated, "the token was rejected")
	}
	return &token.Claims{Issuer: "acme", Subject: "alice"}, nil
}

// httpAPIEdge is an edge in front of a runner that answers every request 200 {"entries":[]}.
func httpAPIEdge(t *testing.T) string {
	t.Helper()
	ledger, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	runner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httpx.WriteJSON(w, http.StatusOK, map[string][]string{"entries": {}})
	}))
	t.Cleanup(runner.Close)
	e, err := New(Config{Region: "test", Verifier: oneTokenVerifier{}, Sandboxes: grantRunner{addr: strings.TrimPrefix(runner.URL, "http://")},
		Ledger: ledger, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// call sends method path with the Authorization header auth (none when "") and returns the answer's status,
// headers and wire error (nil for a 2xx).
func call(t *testing.T, base, method, path, auth string) (int, http.Header, *wire.Error) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return resp.StatusCode, resp.Header, nil
	}
	var we wire.Error
	if err := json.NewDecoder(resp.Body).Decode(&we); err != nil || !we.Code.Valid() || we.Message == "" {
		t.Fatalf("%s %s: %d is not a wire error (%v)", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header, &we
}

// Unknown paths and wrong methods are {code, message} like every other error (docs/PROTOCOL.md#errors),
// never Go's plain-text 404 and 405.
func TestEdgeUnknownRoutesAreWireErrors(t *testing.T) {
	base := httpAPIEdge(t)
	for _, path := range []string{"/", "/nope", "/v1/nope", "/v1/", "/ws/x"} {
		if status, _, we := call(t, base, "GET", path, ""); status != http.StatusNotFound || we.Code != wire.NotFound {
			t.Errorf("GET %s: %d %+v", path, status, we)
		}
	}
	for _, c := range []struct{ method, path, allow string }{
		{"POST", "/v1/regions", "GET, HEAD"},
		{"DELETE", "/healthz", "GET, HEAD"},
		{"PUT", "/v1/execute", "GET, POST"},
		{"POST", "/ws", "GET, HEAD"},
	} {
		status, h, we := call(t, base, c.method, c.path, "")
		if status != http.StatusBadRequest || we.Code != wire.InvalidArgument || h.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %q %+v", c.method, c.path, status, h.Get("Allow"), we)
		}
	}
}

// The bearer rule (docs/PROTOCOL.md#auth-header): the scheme in any case, the token exact.
func TestEdgeBearerRule(t *testing.T) {
	base := httpAPIEdge(t)
	for _, auth := range []string{"Bearer good", "bearer good", "BEARER  good ", "bEaReR\tgood"} {
		if status, _, we := call(t, base, "GET", "/v1/sessions", auth); status != http.StatusOK {
			t.Errorf("%q: %d %+v", auth, status, we)
		}
	}
	for _, auth := range []string{"Bearer goo", "Bearer Good", "Bearer good2", "Basic good", "Bearergood", "Bearer go od", "Bearer "} {
		if status, _, we := call(t, base, "GET", "/v1/sessions", auth); status != http.StatusUnauthorized || we.Code != wire.Unauthenticated {
			t.Errorf("%q: %d %+v", auth, status, we)
		}
	}
}

// The request id rule (docs/PROTOCOL.md#request-id): a client's id of the rule is kept, any other replaced.
func TestEdgeRequestIDRule(t *testing.T) {
	base := httpAPIEdge(t)
	for sent, kept := range map[string]bool{
		"trace-1.2:3_x":         true,
		strings.Repeat("a", 64): true,
		strings.Repeat("a", 65): false,
		"has space":             false,
		"semi;colon":            false,
	} {
		req, _ := http.NewRequest("GET", base+"/healthz", nil)
		req.Header.Set("X-Request-Id", sent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Request-Id"); (got == sent) != kept || !httpx.ValidRequestID(got) {
			t.Errorf("sent %q, echoed %q", sent, got)
		}
	}
}
