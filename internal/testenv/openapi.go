package testenv

import (
	"encoding/json"
	"strings"
	"testing"
)

// OpenAPIRefs fails t for every $ref of the OpenAPI document doc that does not point at a component it
// defines (#/components/<kind>/<name>).
func OpenAPIRefs(t testing.TB, doc []byte) {
	t.Helper()
	var d struct {
		Comp map[string]map[string]any `json:"components"`
	}
	var all any
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("OpenAPI document: %v", err)
	}
	_ = json.Unmarshal(doc, &all)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
				if len(parts) != 2 || d.Comp[parts[0]][parts[1]] == nil {
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
	walk(all)
}
