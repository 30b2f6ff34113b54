package edge

import (
	"io"
	"net/http"
	"strings"
	"testing"

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
