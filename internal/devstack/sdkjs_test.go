package devstack_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/runner"
)

// sdkJSDir is the TypeScript SDK (sdk/js), from this package's directory.
const sdkJSDir = "../../sdk/js"

// TestTypeScriptSDK builds the TypeScript SDK and runs its tests with node's test runner against a dev stack
// with the real Claude Code CLI and the scripted model (and a second edge): sessions, one-shot prompts,
// reconnects with lastSeq (through the same edge and another), interrupts, client tools, the sandbox API,
// typed errors and the SDK's own tokens, which the edge verifies (the tests mint every token they use with
// the dev issuer's secret); and the browser build in headless Chromium over the browser's own WebSocket.
func TestTypeScriptSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	node, chromium := buildSDKJS(t, ctx)

	master := "js-webhook-master-secret-0123456789"
	secretFile := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(secretFile, []byte(master), 0o600); err != nil {
		t.Fatal(err)
	}
	st := agentStack(t, agentOpts{args: []string{"-webhook-secret-file", secretFile, "-webhook-allow-private"}})
	edge2 := startEdge(t, st, "js2")
	if st.DevKey.Form != secrets.FormText {
		t.Fatalf("the dev issuer's key is %v, want a text secret", st.DevKey)
	}
	args := []string{"--test", "--test-concurrency=1", "--test-reporter=spec"}
	if pat := os.Getenv("WARREN_JS_TESTS"); pat != "" {
		args = append(args, "--test-name-pattern="+pat) // one test, e.g. WARREN_JS_TESTS=interrupt
	}
	run := exec.CommandContext(ctx, node, append(args, "dist/test/")...)
	run.Dir = sdkJSDir
	run.Env = append(os.Environ(),
		"WARREN_URL="+st.URL(),
		"WARREN_ISSUER="+devstack.DevIssuer,
		"WARREN_SECRET="+st.DevKey.Given(),
		"WARREN_KID="+st.DevKey.ID,
		"WARREN_CHROMIUM="+chromium,
		"WARREN_EDGE2="+edge2.url,
		"WARREN_WEBHOOK_SECRET="+runner.WebhookSecret([]byte(master), devstack.DevIssuer),
		"NO_COLOR=1",
	)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
}

// buildSDKJS compiles the TypeScript SDK (its sources, tests and benchmark into sdk/js/dist) and returns node
// and chromium; it fails when they or the SDK's npm packages are not installed.
func buildSDKJS(tb testing.TB, ctx context.Context) (node, chromium string) {
	tb.Helper()
	tsc := filepath.Join(sdkJSDir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		tb.Fatalf("the TypeScript SDK's npm packages are not installed (%v): run make sdk-js (part of make tools)", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Fatalf("node not found: run make tools (%v)", err)
	}
	chromium, err = exec.LookPath("chromium")
	if err != nil {
		tb.Fatalf("chromium not found: run make tools (it installs Debian's chromium): %v", err)
	}
	build := exec.CommandContext(ctx, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", ".")
	build.Dir = sdkJSDir
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("tsc: %v\n%s", err, out)
	}
	return node, chromium
}
