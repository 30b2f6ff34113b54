package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// aliasScript calls the model proxy, with the agent's own session token, for two models: the one the
// alias "sonnet" resolves to and another.
const aliasScript = `for m in claude-sonnet-5-5 claude-opus-5-5; do
curl -s -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' \
  -d '{"model":"'$m'","max_tokens":5,"messages":[{"role":"user","content":"x"}]}' \
  "$ANTHROPIC_BASE_URL/v1/messages" > "$m.txt"
done
`

// TestPermissionsModelAlias: a token whose permissions.model is an alias ("sonnet") runs turns with the real
// CLI, whose calls name the model the alias resolves to (claude-sonnet-5-5), and that model only: a call
// for another model is refused. Before, the proxy compared the calls' model with "sonnet" and refused them.
func TestPermissionsModelAlias(t *testing.T) {
	h, ms := agentRunner(t, "", nil)
	if err := os.WriteFile(filepath.Join(h.ws, "alias.sh"), []byte(aliasScript), 0o644); err != nil {
		t.Fatal(err)
	}
	grant := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: 5_000_000, ComputeSeconds: -1,
		Permissions: json.RawMessage(`{"model":"sonnet"}`)}
	c := h.dialAs(t, grant)
	if res, _ := turn(t, c, "", "run sh alias.sh"); res["is_error"] == true {
		t.Fatalf("a turn under permissions.model sonnet: %v", res)
	}
	if f := readWorkspace(t, h, "claude-opus-5-5.txt"); !strings.Contains(f, `"permission_error"`) || !strings.Contains(f, "not allowed by this token") {
		t.Errorf("a call for another model got %q, want permission_error", f)
	}
	if f := readWorkspace(t, h, "claude-sonnet-5-5.txt"); strings.Contains(f, `"error"`) {
		t.Errorf("a call for the model sonnet resolves to got %q", f)
	}
	reqs := ms.Requests()
	if len(reqs) == 0 {
		t.Fatal("no call reached the model")
	}
	for _, r := range reqs {
		if r.Model != "claude-sonnet-5-5" {
			t.Errorf("model %q reached the upstream, want only claude-sonnet-5-5", r.Model)
		}
	}
}
