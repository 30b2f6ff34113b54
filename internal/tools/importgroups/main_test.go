package main

import (
	"slices"
	"strings"
	"testing"
)

const mod = "example.com/m"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, imports string
		want          []string // the quoted import paths reported, in order
	}{
		{"three groups", "import (\n\"fmt\"\n\"os\"\n\n\"golang.org/x/sync/errgroup\"\n\nm \"example.com/m/a\"\n)", nil},
		{"one import", `import "example.com/m/a"`, nil},
		{"no third party", "import (\n\"fmt\"\n\n_ \"example.com/m/a\"\n)", nil},
		{"module root", "import (\n\"fmt\"\n\n\"example.com/m\"\n)", nil},
		{"cgo", "import \"C\"\nimport (\n\"fmt\"\n\n\"example.com/m/a\"\n)", nil},
		{"a doc comment does not split a group", "import (\n\"fmt\"\n// why\n\"os\"\n\n\"example.com/m/a\"\n)", nil},
		{"a doc comment after a blank line starts one", "import (\n\"fmt\"\n\n// why\n\"os\"\n)", []string{`"os"`}},
		{"module in the std group", "import (\n\"fmt\"\n\"example.com/m/a\"\n\"os\"\n)", []string{`"example.com/m/a"`}},
		{"third party in the module group", "import (\n\"fmt\"\n\n\"example.com/m/a\"\n\"golang.org/x/sync/errgroup\"\n)",
			[]string{`"golang.org/x/sync/errgroup"`}},
		{"std after the module", "import (\n\"example.com/m/a\"\n\n\"fmt\"\n)", []string{`"fmt"`}},
		{"std split in two", "import (\n\"fmt\"\n\n\"os\"\n)", []string{`"os"`}},
		{"two declarations", "import \"example.com/m/a\"\nimport \"fmt\"", []string{`"fmt"`}},
		{"a lookalike of the module", "import (\n\"fmt\"\n\n\"example.com/mx\"\n\n\"example.com/m/a\"\n)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, err := check("x.go", []byte("package x\n\n"+tc.imports+"\n"), mod)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range msgs {
				_, rest, _ := strings.Cut(m, ": ")
				got = append(got, strings.Fields(rest)[0])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("reported %q, want %v", msgs, tc.want)
			}
		})
	}
}

func TestCheckSyntaxError(t *testing.T) {
	if _, err := check("x.go", []byte("package x\nimport (\n\"fmt\"\n"), mod); err == nil {
		t.Fatal("no error for an unterminated import block")
	}
}
