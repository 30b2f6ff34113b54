// Package env reads the WARREN_* environment variables that give warren's flags their defaults; the roles
// and the client commands share it.
package env

import "os"

// Or is the value of the variable name, or def when it is unset or empty.
func Or(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// First is the value of the first of names that is set and not empty, else "".
func First(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// DataDir is where warren dev keeps its state (the dev issuer's secrets, SQLite databases, blobs) and
// where client tools look for it: $WARREN_DATA_DIR, else ./.warren.
func DataDir() string { return Or("WARREN_DATA_DIR", "./.warren") }
