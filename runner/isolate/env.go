package isolate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
)

// Environment every command starts from; the host's environment is never inherited.
const (
	DefaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// SandboxUser is the USER (and LOGNAME) a command sees. It is a fixed name, not the end user's id,
	// so nothing about the caller's identity leaks into the sandbox.
	SandboxUser = "sandbox"
)

// ValidEnvName reports whether name matches [A-Za-z_][A-Za-z0-9_]*.
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidateEnv checks a request's environment: names must satisfy ValidEnvName and values must not contain
// NUL. Failures are invalid_argument.
func ValidateEnv(env map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !ValidEnvName(k) {
			return wire.Wrap(wire.InvalidArgument, ErrInvalidSpec,
				fmt.Sprintf("environment variable name %q must match [A-Za-z_][A-Za-z0-9_]*", k))
		}
		if strings.IndexByte(env[k], 0) >= 0 {
			return wire.Wrap(wire.InvalidArgument, ErrInvalidSpec,
				fmt.Sprintf("environment variable %s contains a NUL byte", k))
		}
	}
	return nil
}

// environ is the complete environment of a command: the minimal base (PATH, HOME, LANG, TERM, USER,
// LOGNAME) overridden by the request's variables, as sorted KEY=VALUE pairs.
func environ(home string, extra map[string]string) []string {
	env := map[string]string{
		"PATH":    DefaultPATH,
		"HOME":    home,
		"LANG":    "C.UTF-8",
		"TERM":    "dumb",
		"USER":    SandboxUser,
		"LOGNAME": SandboxUser,
	}
	maps.Copy(env, extra)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
