// Command importgroups checks the grouping of Go imports (make lint): standard library first, then other
// modules, then this module, each kind in one group of its own, groups separated by a blank line. gofmt
// sorts within a group but does not move an import to the right one; goimports -local does only part of it.
//
//	go run ./internal/tools/importgroups -module github.com/warren-mesh/warren $(git ls-files '*.go')
//
// It prints one line per misplaced import and exits 1 if there is any.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
)

func main() {
	module := flag.String("module", "", "import path of this module (its imports form the last group)")
	flag.Parse()
	if *module == "" {
		fmt.Fprintln(os.Stderr, "importgroups: -module is required")
		os.Exit(2)
	}
	bad := 0
	for _, name := range flag.Args() {
		src, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "importgroups:", err)
			os.Exit(2)
		}
		msgs, err := check(name, src, *module)
		if err != nil {
			fmt.Fprintln(os.Stderr, "importgroups:", err)
			os.Exit(2)
		}
		for _, m := range msgs {
			fmt.Println(m)
		}
		bad += len(msgs)
	}
	if bad > 0 {
		fmt.Printf("importgroups: %d imports out of place: standard library, other modules, then %s, one group each\n", bad, *module)
		os.Exit(1)
	}
}

// The kinds of import, in the order their groups come.
const (
	std = iota
	thirdParty
	local
)

var kindName = [...]string{"standard library", "other modules", "this module"}

func kind(path, module string) int {
	switch {
	case path == module || strings.HasPrefix(path, module+"/"):
		return local
	case !strings.Contains(strings.SplitN(path, "/", 2)[0], "."):
		return std
	}
	return thirdParty
}

// check returns a message for each import of the file src that is in the wrong group: a group (imports
// with no blank line between them, within one import declaration) holds imports of one kind, and the
// groups come in the order std, thirdParty, local, so each kind has one group.
func check(name string, src []byte, module string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var msgs []string
	last, groupKind, prevLine := -1, -1, -1 // the kind of the previous group, of this one
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.IMPORT {
			continue
		}
		prevLine = -1 // a new declaration starts a new group
		for _, s := range gd.Specs {
			is := s.(*ast.ImportSpec)
			path, err := strconv.Unquote(is.Path.Value)
			if err != nil || path == "C" {
				continue
			}
			start := is.Pos()
			if is.Doc != nil {
				start = is.Doc.Pos()
			}
			if line := fset.Position(start).Line; prevLine < 0 || line > prevLine+1 {
				if groupKind >= 0 {
					last = groupKind
				}
				groupKind = -1
			}
			prevLine = fset.Position(is.End()).Line
			k := kind(path, module)
			pos := fset.Position(is.Pos())
			switch {
			case groupKind >= 0 && k != groupKind:
				msgs = append(msgs, fmt.Sprintf("%s:%d: %q (%s) in a group of %s", pos.Filename, pos.Line, path, kindName[k], kindName[groupKind]))
			case groupKind < 0 && k <= last:
				msgs = append(msgs, fmt.Sprintf("%s:%d: %q (%s) starts a group after one of %s", pos.Filename, pos.Line, path, kindName[k], kindName[last]))
				groupKind = k
			case groupKind < 0:
				groupKind = k
			}
		}
	}
	return msgs, nil
}
