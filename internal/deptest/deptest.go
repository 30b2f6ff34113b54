// Package deptest keeps the layering of the module true (tailscale's tstest/deptest idea): Warren is one
// binary with every role, so "the runner does not link gRPC" means that no package under runner/ imports
// it, directly or through others. Load reads the import graph with `go list -deps`; Check walks it for the
// rules in layering_test.go and names the chain of imports of every violation.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Graph is the import graph of a module's packages and everything they link (tests excluded): import path
// to the import paths it imports.
type Graph struct {
	Module  string
	Imports map[string][]string
}

// Load lists the packages of the module in dir and their dependencies as built for goos/goarch (so files
// behind build constraints count as they do in the release binary).
func Load(dir, goos, goarch string) (*Graph, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Module", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps: %w: %s", err, stderr.Bytes())
	}
	g := &Graph{Imports: map[string][]string{}}
	d := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Module     *struct {
				Path string
				Main bool
			}
		}
		if err := d.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -deps: %w", err)
		}
		g.Imports[p.ImportPath] = p.Imports
		if p.Module != nil && p.Module.Main {
			g.Module = p.Module.Path
		}
	}
	if g.Module == "" {
		return nil, errors.New("go list -deps: no package of the main module")
	}
	return g, nil
}

// Dep is a set of packages that some part of the module must not link.
type Dep struct {
	Name     string   // for messages: "gRPC"
	Prefixes []string // import paths and everything below them: "google.golang.org/grpc"
	Except   []string // import paths (exact) under Prefixes that are allowed after all
}

func (d Dep) match(path string) bool {
	for _, e := range d.Except {
		if path == e {
			return false
		}
	}
	for _, p := range d.Prefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// Allow is a recorded exception: Via (a package path relative to the module) may import packages of Dep
// directly, for Reason, and the packages of the rule may link Dep through it. An Allow that no longer lets
// anything through is reported, so the list stays true.
type Allow struct {
	Dep, Via, Reason string
}

// Rule says which Deps the packages Pkgs must not link: "edge/..." is edge and everything below it,
// "billing" the one package, both relative to the module. Skip lists patterns of the same form that the
// rule leaves out.
type Rule struct {
	Pkgs   string
	Skip   []string
	Forbid []Dep
	Allow  []Allow
}

// Check returns one message per violation of rules in g: the package, what it links, and the chain of
// imports from the one to the other. A rule whose Pkgs match no package, and an Allow that is no longer
// used, are reported too.
func Check(g *Graph, rules []Rule) []string {
	var msgs []string
	for _, r := range rules {
		pkgs := g.match(r.Pkgs)
		for _, s := range r.Skip {
			skip := g.match(s)
			if len(skip) == 0 {
				msgs = append(msgs, fmt.Sprintf("rule %s: skipped %s matches no package", r.Pkgs, s))
			}
			pkgs = slices.DeleteFunc(pkgs, func(p string) bool { return slices.Contains(skip, p) })
		}
		if len(pkgs) == 0 {
			msgs = append(msgs, fmt.Sprintf("rule %s: no package matches", r.Pkgs))
			continue
		}
		for _, d := range r.Forbid {
			msgs = append(msgs, g.check(r, d, pkgs)...)
		}
	}
	return msgs
}

func (g *Graph) check(r Rule, d Dep, pkgs []string) []string {
	var msgs []string
	vias := map[string]bool{} // the packages an Allow lets import d
	for _, a := range r.Allow {
		if a.Dep == d.Name {
			vias[g.Module+"/"+a.Via] = true
		}
	}
	used := map[string]bool{}
	for _, p := range pkgs {
		if chain := g.Chain(p, d.match, vias); chain != nil {
			msgs = append(msgs, fmt.Sprintf("%s links %s (%s, forbidden by rule %s): %s",
				g.rel(p), g.rel(chain[len(chain)-1]), d.Name, r.Pkgs, g.show(chain)))
			continue
		}
		for via := range vias { // used when p links d with only this exception in force
			others := maps.Clone(vias)
			delete(others, via)
			if !used[via] && g.Chain(p, d.match, others) != nil {
				used[via] = true
			}
		}
	}
	for via := range vias {
		if !used[via] {
			msgs = append(msgs, fmt.Sprintf("rule %s: the exception letting it link %s via %s is no longer needed: remove it",
				r.Pkgs, d.Name, g.rel(via)))
		}
	}
	return msgs
}

// match lists the module's packages that pattern names ("x/..." or "x").
func (g *Graph) match(pattern string) []string {
	root, tree := strings.CutSuffix(pattern, "/...")
	root = g.Module + "/" + root
	var out []string
	for p := range g.Imports {
		if p == root || tree && strings.HasPrefix(p, root+"/") {
			out = append(out, p)
		}
	}
	return out
}

// Chain is the shortest chain of imports from pkg to a package bad matches, leaving out the imports of such
// packages by the packages in allowed, or nil when there is none.
func (g *Graph) Chain(pkg string, bad func(string) bool, allowed map[string]bool) []string {
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if bad(p) {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, q := range g.Imports[p] {
			if _, seen := prev[q]; !seen && !(allowed[p] && bad(q)) {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

func (g *Graph) rel(p string) string {
	if r, ok := strings.CutPrefix(p, g.Module+"/"); ok {
		return r
	}
	return p
}

func (g *Graph) show(chain []string) string {
	s := make([]string, len(chain))
	for i, p := range chain {
		s[i] = g.rel(p)
	}
	return strings.Join(s, " → ")
}
