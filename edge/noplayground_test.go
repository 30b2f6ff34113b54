package edge

import (
	"net/http"
	"strings"
	"testing"
)

// The dev playground and its token endpoint (internal/playground) are mounted by the dev stack only: the
// edge's Handler, which the production edge role serves as its whole API (cmd/warren's runEdge, with
// /metrics beside it), answers not_found for them, with CORS on and a token in hand.
func TestEdgeServesNoPlayground(t *testing.T) {
	url := corsEdge(t, []string{"*"})
	for _, c := range []struct{ method, path string }{
		{"GET", "/playground/"}, {"GET", "/playground"}, {"GET", "/playground/app.js"}, {"GET", "/playground/sdk/index.js"},
		{"POST", "/playground/token"}, {"GET", "/playground/token"},
	} {
		req, err := http.NewRequest(c.method, url+c.path, strings.NewReader(`{"user":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", url)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %d, want 404", c.method, c.path, resp.StatusCode)
		}
	}
}
