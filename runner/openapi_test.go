package runner_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/testenv"
)

// docs/sandbox-openapi.json and the runner (whose paths the edge relays unchanged) describe the same API
// (but for the paths marked x-warren-served-by: edge):
// every documented operation is served (never "no route" or "method not allowed"), and every $ref resolves.
func TestSandboxOpenAPIMatchesRoutes(t *testing.T) {
	b, err := os.ReadFile("../docs/sandbox-openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	h := startRunner(t)
	ops := 0
	for path, item := range doc.Paths {
		if item["x-warren-served-by"] == "edge" {
			continue // the edge serves it itself (preview URLs); internal/devstack's tests drive it
		}
		for method := range item {
			if method == "parameters" {
				continue
			}
			ops++
			p := strings.NewReplacer("{id}", "x").Replace(path)
			resp := h.do(t, strings.ToUpper(method), p+"?path=.", strings.NewReader("{}"))
			body, _ := io.ReadAll(resp.Body)
			if strings.Contains(string(body), "no route for") || strings.Contains(string(body), "is not allowed here") {
				t.Errorf("%s %s is documented but not served: %d %s", method, path, resp.StatusCode, body)
			}
		}
	}
	if ops < 14 {
		t.Fatalf("only %d operations documented", ops)
	}
	// An operation the document does not list is refused.
	if resp := h.do(t, http.MethodPut, "/v1/sandbox/procs/x/wait", nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("PUT wait: %d", resp.StatusCode)
	}
	testenv.OpenAPIRefs(t, b)
}
