package main

import "os"

// defaultDataDir is where warren dev keeps its state (the dev issuer's secrets, SQLite databases, blobs) and
// where client tools look for it: $WARREN_DATA_DIR, else ./.warren.
func defaultDataDir() string {
	if d := os.Getenv("WARREN_DATA_DIR"); d != "" {
		return d
	}
	return "./.warren"
}
