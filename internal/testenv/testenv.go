// Package testenv finds and starts the real programs tests run against, as installed by `make tools` into
// the tools cache (outside the repository): the Claude Code CLI now, the servers of the production adapters
// later. A test that needs a missing tool fails with the command that installs it; only -short skips.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// ClaudeCodeVersion is the pinned @anthropic-ai/claude-code release `make tools` installs.
const ClaudeCodeVersion = "2.1.330"

// ToolsDir is where `make tools` installs: $WARREN_TOOLS_DIR, else $XDG_CACHE_HOME/warren/tools, else
// ~/.cache/warren/tools.
func ToolsDir() string {
	if d := os.Getenv("WARREN_TOOLS_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "warren", "tools")
}

// ClaudeCLIPath is where the native Claude Code binary lives once installed ("" if it is not).
func ClaudeCLIPath() string {
	p := filepath.Join(ToolsDir(), "claude-code", "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude")
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p
	}
	return ""
}

// ClaudeCLI returns the Claude Code CLI for a test, skipping under -short and failing when it is missing.
func ClaudeCLI(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Claude Code CLI")
	}
	p := ClaudeCLIPath()
	if p == "" {
		t.Fatalf("the Claude Code CLI is not installed in %s: run `make tools`", ToolsDir())
	}
	return p
}
