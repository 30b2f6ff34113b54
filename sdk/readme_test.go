package warren_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// declared finds the names a line of Go declares with :=.
var declared = regexp.MustCompile(`(?m)^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*:=`)

// The README's Go example, built as a program of another module (one requiring this one through a replace
// directive): what it names must be reachable from outside, so no internal package may appear in it. The
// example's elisions ("...") become uses of the loop variables; the names it leaves undefined (ctx, token,
// lookup, confirm) are declared around it.
func TestReadmeGoExampleBuildsOutsideTheModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build on a module of its own")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i := strings.Index(s, "From Go, the SDK")
	if i < 0 {
		t.Fatal("README: no \"From Go, the SDK\" section")
	}
	s = s[i:]
	start := strings.Index(s, "```go\n")
	if start < 0 {
		t.Fatal("README: no Go block after \"From Go, the SDK\"")
	}
	s = s[start+len("```go\n"):]
	end := strings.Index(s, "```")
	if end < 0 {
		t.Fatal("README: the Go block is not closed")
	}
	body := strings.ReplaceAll(s[:end], "...", "_, _ = ev, err")
	if strings.Contains(body, "internal/") || strings.Contains(body, "wire.") {
		t.Fatalf("the README's Go example names an internal package:\n%s", body)
	}
	// Every variable the example declares is used once more, so one it declares for the reader's sake
	// (a result it only shows) does not fail the build.
	var uses strings.Builder
	seen := map[string]bool{}
	for _, m := range declared.FindAllStringSubmatch(body, -1) {
		for _, name := range strings.Split(m[1], ",") {
			if name = strings.TrimSpace(name); name != "_" && !seen[name] {
				seen[name] = true
				uses.WriteString("\t_ = " + name + "\n")
			}
		}
	}
	prog := `package main

import (
	"context"
	"encoding/json"

	warren "github.com/warren-mesh/warren/sdk"
)

var (
	ctx     = context.Background()
	token   = "t"
	lookup  = func(context.Context, json.RawMessage) (warren.ToolResult, error) { return warren.ToolResult{}, nil }
	confirm func(context.Context, warren.HostCall) bool
)

func main() {
` + body + uses.String() + `}
`
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := "module example.com/readme\n\ngo 1.25\n\nrequire github.com/warren-mesh/warren v0.0.0\n\nreplace github.com/warren-mesh/warren => " + repo + "\n"
	for name, data := range map[string]string{"main.go": prog, "go.mod": mod, "go.sum": string(sum)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go example does not build outside the module: %v\n%s\n--- program ---\n%s", err, out, prog)
	}
}
