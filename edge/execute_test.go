package edge

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/wire"
)

// The task API is relayed like the sandbox API, also over the mesh to the region holding the user: path,
// method, Idempotency-Key and body arrive unchanged at the runner with the runner's key and the admitting
// edge's grant; other methods are refused at the edge.
func TestForwardExecute(t *testing.T) {
	rn := newMeshRunner(t)
	_, b, _ := twoRegions(t, rn, live)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(testCtx(t), method, b.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "k-7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if code, out := do("POST", "/v1/execute", `{"prompt":"hi"}`); code != http.StatusAccepted || out != `POST /v1/execute k-7 {"prompt":"hi"}` {
		t.Fatalf("POST /v1/execute through b: %d %q", code, out)
	}
	g, key := rn.last()
	if key != "Bearer runner-key" || g.User != "alice" || g.Limits == nil || g.Limits.Processes != 77 {
		t.Fatalf("runner got key %q, grant %+v", key, g)
	}
	if code, out := do("GET", "/v1/execute/t-abc", ""); code != http.StatusAccepted || !strings.HasPrefix(out, "GET /v1/execute/t-abc ") {
		t.Fatalf("GET /v1/execute/{id} through b: %d %q", code, out)
	}
	if code, out := do("DELETE", "/v1/execute/t-abc", ""); code != http.StatusBadRequest || !strings.Contains(out, string(wire.InvalidArgument)) {
		t.Fatalf("DELETE: %d %q", code, out)
	}
}

// A task is a prompt: POST /v1/execute takes from the user's prompt rate (refused rate_limited with
// Retry-After before it reaches the runner); fetching tasks does not.
func TestExecuteTakesThePromptRate(t *testing.T) {
	rn := newMeshRunner(t)
	ledger, err := billingsqlite.New(context.Background(), billingsqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	e, err := New(Config{
		Region: "a", Verifier: claimsVerifier{issuer: "acme"}, Ledger: ledger, Sessions: ledger.Sessions(),
		Sandboxes: &oneRunner{addr: strings.TrimPrefix(rn.url, "http://")},
		Rates:     Rates{ConnectsPerUser: -1, ConnectsPerIssuer: -1, PromptsPerUser: 1, PromptsPerIssuer: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	do := func(method, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(testCtx(t), method, srv.URL+path, strings.NewReader(`{"prompt":"hi"}`))
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := do("POST", "/v1/execute"); r.StatusCode != http.StatusAccepted {
		t.Fatalf("first task: %s", r.Status)
	}
	r := do("POST", "/v1/execute")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("second task within the minute: %s %v", r.Status, r.Header)
	}
	rn.mu.Lock()
	seen := len(rn.grants)
	rn.mu.Unlock()
	if seen != 1 {
		t.Fatalf("the runner saw %d task requests, want 1", seen)
	}
	if r := do("GET", "/v1/execute"); r.StatusCode != http.StatusAccepted {
		t.Fatalf("listing after the rate ran out: %s", r.Status)
	}
}
