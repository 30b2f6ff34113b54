package runner_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// TestAgentHeldToTheWorkspaceCap: an agent's own tool commands (the CLI's Bash) fill the workspace past its
// cap during a turn. Commands started through the sandbox API had a disk watch; the agent's process had
// none, so a prompt-injected agent could write without bound for its whole turn (the next command was only
// refused). Now the agent's process is ended like a command once it takes the workspace over its cap, and
// the turn fails naming why.
func TestAgentHeldToTheWorkspaceCap(t *testing.T) {
	needRoot(t)
	const limit = 8 << 20
	g := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: -1, ComputeSeconds: -1,
		Limits: &wire.SandboxLimits{WorkspaceBytes: limit}}
	h, _ := agentRunner(t, "auto", nil)
	var res wire.ExecResult
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{Command: "true"}, wire.HeaderGrant, g.Encode()), http.StatusOK, &res)
	r, _ := turn(t, h.dialAs(t, g), "", "run for i in $(seq 1 80); do head -c 1048576 /dev/zero > f$i; sleep 0.1; done; echo wrote-all")
	text := fmt.Sprint(r["result"])
	if r["is_error"] != true || !strings.Contains(text, "workspace") {
		t.Fatalf("an agent wrote past the workspace's cap and its turn ended: %v", r)
	}
	var du wire.ExecResult
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{Command: "ls | wc -l"}, wire.HeaderGrant, g.Encode()), http.StatusOK, &du)
	if n := strings.TrimSpace(du.Stdout); n == "80" {
		t.Fatalf("all 80 MiB were written under a cap of %d bytes: %+v", limit, du)
	}
}
