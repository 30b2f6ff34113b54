package runner_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// docs/sandbox-openapi.json and the runner (whose paths the edge relays unchanged) describe the same API:
// every documented operation is served (never "no route" or "method not allowed"), and every $ref resolves.
func TestSandboxOpenAPIMatchesRoutes(t *testing.T) {
	b, err := os.ReadFile("../docs/sandbox-openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]any            `json:"paths"`
		Comp    map[string]map[string]map[string]any `json:"components"`
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
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
				if len(parts) != 2 || doc.Comp[parts[0]][parts[1]] == nil {
					t.Errorf("dangling $ref %q", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var all any
	_ = json.Unmarshal(b, &all)
	walk(all)
}
