// Package tools knows where `make tools` installs what Warren runs but does not build: the Claude Code CLI
// and the servers of the production adapters' tests (Nomad, Consul, Vault, versitygw; see servers/), and
// Terraform for the tests of terraform/. The cache lives outside the repository.
package tools

import (
	"os"
	"os/exec"
	"path/filepath"
)

// ClaudeCodeVersion is the pinned @anthropic-ai/claude-code release `make tools` installs.
const ClaudeCodeVersion = "2.1.330"

// Dir is where `make tools` installs: $WARREN_TOOLS_DIR, else $XDG_CACHE_HOME/warren/tools, else
// ~/.cache/warren/tools.
func Dir() string {
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

// ClaudeCLIPath is the native Claude Code binary installed by `make tools`, or "" when it is not there.
func ClaudeCLIPath() string {
	p := filepath.Join(Dir(), "claude-code", "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude")
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p
	}
	return ""
}

// FindClaudeCLI is the CLI a runner uses: $WARREN_CLAUDE_CLI, else the tools cache, else `claude` in PATH.
func FindClaudeCLI() string {
	if p := os.Getenv("WARREN_CLAUDE_CLI"); p != "" {
		return p
	}
	if p := ClaudeCLIPath(); p != "" {
		return p
	}
	if p, err := exec.LookPath("claude"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return ""
}

// Servers are the programs `make tools` builds into Dir()/bin for the production adapters' tests
// (internal/tools/servers/build.sh): Nomad v1.6.1, Consul v1.16.3, Vault v1.14.2 and versitygw v1.8.0 (S3).
var Servers = []string{"nomad", "consul", "vault", "versitygw"}

// ServerPath is the binary of server name built by `make tools`, or "" when it is not there.
func ServerPath(name string) string {
	p := filepath.Join(Dir(), "bin", name)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p
	}
	return ""
}

// JSONWebTokenVersion is the pinned jsonwebtoken (npm) release `make tools` installs for the token interop
// tests (internal/token), which mint tokens with it as a customer's Node backend does.
const JSONWebTokenVersion = "9.0.3"

// NodeModulesJWT is the node_modules folder holding jsonwebtoken installed by `make tools` (NODE_PATH for
// `node -e`), or "" when it is not there.
func NodeModulesJWT() string {
	p := filepath.Join(Dir(), "jwt-node", "node_modules")
	if st, err := os.Stat(filepath.Join(p, "jsonwebtoken", "package.json")); err == nil && st.Mode().IsRegular() {
		return p
	}
	return ""
}

// TerraformVersion is the pinned Terraform release `make tools` builds with go install (the last
// MPL-licensed one) for the tests of terraform/.
const TerraformVersion = "1.5.7"
