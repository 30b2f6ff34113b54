// Package testenv finds and starts the real programs tests run against, as installed by `make tools` into
// the tools cache (outside the repository; see internal/tools). A test that needs a missing tool fails with
// the command that installs it; only -short skips.
package testenv

import (
	"testing"

	"github.com/warren-mesh/warren/internal/tools"
)

// ClaudeCodeVersion is the pinned Claude Code release.
const ClaudeCodeVersion = tools.ClaudeCodeVersion

// ToolsDir is where `make tools` installs.
func ToolsDir() string { return tools.Dir() }

// ClaudeCLIPath is where the native Claude Code binary lives once installed ("" if it is not).
func ClaudeCLIPath() string { return tools.ClaudeCLIPath() }

// ClaudeCLI returns the Claude Code CLI for a test, skipping under -short and failing when it is missing.
func ClaudeCLI(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Claude Code CLI")
	}
	p := tools.ClaudeCLIPath()
	if p == "" {
		t.Fatalf("the Claude Code CLI is not installed in %s: run `make tools`", tools.Dir())
	}
	return p
}

// Binary returns the path of a server `make tools` builds (nomad, consul, vault, versitygw), skipping
// under -short and failing when it is missing: a missing install is never a skip.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs the %s server", name)
	}
	p := tools.ServerPath(name)
	if p == "" {
		t.Fatalf("%s is not installed in %s/bin: run `make tools`", name, tools.Dir())
	}
	return p
}
