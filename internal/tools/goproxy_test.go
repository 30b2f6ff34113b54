package tools_test

import (
	"os"
	"regexp"
	"testing"
)

// The builds take the Go module proxy from `go env GOPROXY` (what the machine is configured with), never an
// address of their own: a mirror set with GOPROXY or go env -w is the one used.
func TestBuildsSpellNoGoProxyAddress(t *testing.T) {
	spelt := regexp.MustCompile(`(?i)GOPROXY\s*[:?]?=\s*["']?https?://|proxy\.golang\.org|goproxy\.(io|cn)`)
	for _, f := range []string{"../../Makefile", "servers/build.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := spelt.Find(b); m != nil {
			t.Errorf("%s spells a Go proxy address (%q): take it from go env GOPROXY", f, m)
		}
	}
}
