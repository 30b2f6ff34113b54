package help

import (
	"strings"
	"testing"
)

func TestWrap(t *testing.T) {
	long := strings.Repeat("word ", 30)
	for _, tc := range []struct{ name, in string }{
		{"paragraph", long + "\n" + long},
		{"table", "  name ARG      " + long},
		{"indented", "        " + long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Wrap(tc.in, "")
			for _, l := range strings.Split(got, "\n") {
				if len(l) > Width {
					t.Errorf("line of %d: %q", len(l), l)
				}
			}
			if strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields(tc.in), " ") {
				t.Errorf("words changed: %q", got)
			}
		})
	}
	if got := Wrap("  put A B      upload "+long, ""); !strings.HasPrefix(strings.Split(got, "\n")[1], strings.Repeat(" ", 15)+"word") {
		t.Errorf("a table line does not continue under its description:\n%s", got)
	}
}
