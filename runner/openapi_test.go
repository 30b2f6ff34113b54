package runner_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
)

// docs/sandbox-openapi.json and the runner (whose paths the edge relays unchanged) describe the same API
// (but for the paths marked x-warren-served-by: edge):
// every documented operation is served (never the typed "no route" not_found or the wrong-method
// invalid_argument with Allow), and every $ref resolves.
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
			var we wire.Error
			_ = json.Unmarshal(body, &we)
			noRoute := we.Code == wire.NotFound && strings.Contains(we.Message, "runner API has no route")
			wrongMethod := we.Code == wire.InvalidArgument && resp.Header.Get("Allow") != ""
			if noRoute || wrongMethod {
				t.Errorf("%s %s is documented but not served: %d %s", method, path, resp.StatusCode, body)
			}
		}
	}
	if ops < 14 {
		t.Fatalf("only %d operations documented", ops)
	}
	// An operation the document does not list is refused.
	resp := h.do(t, http.MethodPut, "/v1/sandbox/procs/x/wait", nil)
	if we := wantError(t, resp, wire.InvalidArgument); resp.Header.Get("Allow") != "POST" ||
		we.Message != "method PUT is not allowed on /v1/sandbox/procs/x/wait: use POST" {
		t.Fatalf("PUT wait: %q %+v", resp.Header.Get("Allow"), we)
	}
	testenv.OpenAPIRefs(t, b)
}
