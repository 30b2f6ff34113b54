package httpx

import (
	"crypto/tls"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

func TestNewServerLimits(t *testing.T) {
	s := NewServer(nil, Config{})
	if s.ReadHeaderTimeout != DefaultReadHeaderTimeout || s.IdleTimeout != DefaultIdleTimeout ||
		s.MaxHeaderBytes != DefaultMaxHeaderBytes || s.ReadTimeout != 0 || s.WriteTimeout != 0 || s.ErrorLog != nil {
		t.Fatalf("defaults: %+v", s)
	}
	c := Config{ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second,
		WriteTimeout: 4 * time.Second, MaxHeaderBytes: 5}
	s = NewServer(nil, c)
	if s.ReadHeaderTimeout != c.ReadHeaderTimeout || s.IdleTimeout != c.IdleTimeout || s.ReadTimeout != c.ReadTimeout ||
		s.WriteTimeout != c.WriteTimeout || s.MaxHeaderBytes != c.MaxHeaderBytes {
		t.Fatalf("configured: %+v", s)
	}
	h3 := NewHTTP3Server(nil, &tls.Config{}, &quic.Config{}, Config{})
	if h3.IdleTimeout != DefaultIdleTimeout || h3.MaxHeaderBytes != DefaultMaxHeaderBytes || len(h3.TLSConfig.NextProtos) == 0 {
		t.Fatalf("HTTP/3: %+v", h3)
	}
}

// serverMakers are what builds a server with no limits but NewServer and NewHTTP3Server: a server literal
// (or new(T)), and the package functions that make one of their own.
var serverMakers = map[string][]string{
	"net/http":                         {"Server", "ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS"},
	"github.com/quic-go/quic-go/http3": {"Server", "ListenAndServeQUIC", "ListenAndServeTLS"},
}

// TestEveryListenerFromNewServer: no Go file of the module, tests included, builds an HTTP server any other
// way, so every listener has the limits of Config.
func TestEveryListenerFromNewServer(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	own, _ := filepath.Abs(".")
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || filepath.Dir(path) == own {
			return nil
		}
		files++
		for _, bad := range serverMade(t, path) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s:%s: build the server with httpx.NewServer or NewHTTP3Server", rel, bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files under %s", files, root)
	}
}

// serverMade lists the lines of path where a server is built by a serverMakers name.
func serverMade(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{} // local import name → forbidden selectors
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		sels, ok := serverMakers[p]
		if !ok {
			continue
		}
		name := p[strings.LastIndexByte(p, '/')+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		names[name] = sels
	}
	if len(names) == 0 {
		return nil
	}
	forbidden := func(e ast.Expr, types bool) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return false
		}
		for _, s := range names[x.Name] {
			if s == sel.Sel.Name && (s == "Server") == types {
				return true
			}
		}
		return false
	}
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if forbidden(n.Type, true) {
				bad = append(bad, strconv.Itoa(fset.Position(n.Pos()).Line))
			}
		case *ast.CallExpr:
			if forbidden(n.Fun, false) {
				bad = append(bad, strconv.Itoa(fset.Position(n.Pos()).Line))
			}
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "new" && len(n.Args) == 1 && forbidden(n.Args[0], true) {
				bad = append(bad, strconv.Itoa(fset.Position(n.Pos()).Line))
			}
		}
		return true
	})
	return bad
}
