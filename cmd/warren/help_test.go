package main

import (
	"bytes"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
)

// subcommandLine is a line of a "commands:" list: two spaces, then one or two lowercase words.
var subcommandLine = regexp.MustCompile(`^  ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?(?:\s|$)`)

// Every command's and subcommand's -h fits help.Width columns (but for a single word longer than that,
// such as a path, which no wrapping can break) and never prints the flag package's bare "Usage of". Before
// the help package, 18 commands were wider (edge: 302 columns) and 11 printed "Usage of".
func TestHelpFitsAndHasUsage(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		text := checkHelp(t, n)
		for _, l := range strings.Split(text, "\n") {
			m := subcommandLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			checkHelp(t, n, m[1])
			if m[2] != "" {
				checkHelp(t, n, m[1], m[2])
			}
		}
	}
}

// checkHelp runs warren args... -h and checks what it prints.
func checkHelp(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	runMain(append(args, "-h"), &out, &errb)
	text := out.String() + errb.String()
	if strings.Contains(text, "Usage of") {
		t.Errorf("warren %s -h prints a bare Usage of:\n%s", strings.Join(args, " "), text)
	}
	for _, l := range strings.Split(text, "\n") {
		if utf8.RuneCountInString(l) > help.Width && strings.Contains(strings.TrimSpace(l), " ") {
			t.Errorf("warren %s -h: a line of %d columns: %q", strings.Join(args, " "), utf8.RuneCountInString(l), l)
		}
	}
	return text
}

func TestVersionFlag(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		var out, errb bytes.Buffer
		if code := runMain([]string{arg}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "warren "+version) {
			t.Errorf("warren %s: %d %q %q", arg, code, out.String(), errb.String())
		}
	}
}
