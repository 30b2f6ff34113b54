package claude

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/internal/tools"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/session"
)

// TestPinnedModelsAreTheCLIs: the installed CLI is the pinned version, the driver knows it, and the CLI's
// own answer to an SDK initialize request maps every model choice as pinnedModels does. A CLI bump that
// changes the aliases fails here until the table follows.
func TestPinnedModelsAreTheCLIs(t *testing.T) {
	r := newRig(t)
	if v := cliVersion(r.cli); v != tools.ClaudeCodeVersion {
		t.Fatalf("the installed CLI %s is version %q, pinned %q: run `make tools`", r.cli, v, tools.ClaudeCodeVersion)
	}
	d := r.driver(t, "", nil)
	if !d.models.pinned {
		t.Fatal("the driver does not use the pinned table for the pinned CLI")
	}
	got := d.probeModels()
	if !maps.Equal(got, pinnedModels) {
		t.Errorf("CLI %s resolves its models as %v; pinnedModels says %v", tools.ClaudeCodeVersion, got, pinnedModels)
	}
}

// countingCLI is the real CLI behind a script that appends a line to the returned file at every start,
// with a package.json beside it naming version (none when version is ""). The driver must run it with
// Insecure (the script and the real CLI are host paths).
func countingCLI(t *testing.T, real, version string) (cli, starts string) {
	t.Helper()
	dir := t.TempDir()
	starts = filepath.Join(dir, "starts")
	cli = filepath.Join(dir, "claude")
	script := fmt.Sprintf("#!/bin/sh\necho start >> '%s'\nexec '%s' \"$@\"\n", starts, real)
	if err := os.WriteFile(cli, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if version != "" {
		pkg := fmt.Sprintf(`{"name":"@anthropic-ai/claude-code-linux-x64","version":%q}`, version)
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(pkg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cli, starts
}

func startsOf(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("start\n"))
}

// TestCheckStartsNoProcess: with the pinned CLI, Check (what the hub waits for before ready) names the
// model of "", of every alias and of a full name without starting a CLI process; an unknown name is
// kept as it is, as before, and a malformed one is still invalid_argument. The turn's system/init names
// the model Check named, and the counting hook does count the turn's process.
func TestCheckStartsNoProcess(t *testing.T) {
	r := newRig(t)
	cli, starts := countingCLI(t, r.cli, tools.ClaudeCodeVersion)
	d := r.driver(t, "", func(c *Config) { c.CLIPath, c.Insecure, c.Bwrap, c.Sandbox = cli, true, "", nil })
	ctx := context.Background()
	want := map[string]string{"": pinnedModels["default"], "claude-sonnet-4-5": "claude-sonnet-4-5", "warren-no-such-model": "warren-no-such-model"}
	for alias, model := range pinnedModels {
		if alias != "default" {
			want[alias] = model
		}
	}
	for name, model := range want {
		got, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{Model: name}})
		if err != nil || got.Model != model {
			t.Errorf("Check model %q: %q, %v; want %q", name, got.Model, err, model)
		}
	}
	if _, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{Model: "sonnet\x01"}}); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("a malformed model name: %v, want invalid_argument", err)
	}
	if n := startsOf(t, starts); n != 0 {
		t.Fatalf("Check started %d CLI processes", n)
	}

	tr := run(t, ctx, d, session.NewID(), wire.SessionOptions{Model: "haiku"}, "hello")
	mustSucceed(t, tr)
	if got := tr.events[0]["model"]; got != pinnedModels["haiku"] {
		t.Errorf("system/init of a haiku session names %v, Check %q", got, pinnedModels["haiku"])
	}
	if n := startsOf(t, starts); n != 1 {
		t.Errorf("a turn started %d CLI processes, want 1", n)
	}
}

// TestCheckAsksOtherCLIs: a CLI that is not the pinned version, or one whose environment renames a
// model, is asked (once per driver): the table does not apply to it.
func TestCheckAsksOtherCLIs(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, version string
		env           map[string]string
		sonnet        string
	}{
		{"another version", "0.0.1", nil, pinnedModels["sonnet"]},
		{"no package.json", "", nil, pinnedModels["sonnet"]},
		{"a model variable", tools.ClaudeCodeVersion, map[string]string{"ANTHROPIC_DEFAULT_SONNET_MODEL": "claude-sonnet-4-5"}, "claude-sonnet-4-5"},
	} {
		cli, starts := countingCLI(t, r.cli, tc.version)
		d := r.driver(t, "", func(c *Config) { c.CLIPath, c.Insecure, c.Bwrap, c.Sandbox, c.Env = cli, true, "", nil, tc.env })
		if d.models.pinned {
			t.Errorf("%s: the pinned table applies", tc.name)
		}
		for range 2 {
			got, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{Model: "sonnet"}})
			if err != nil || got.Model != tc.sonnet {
				t.Errorf("%s: Check sonnet: %q, %v; want %q", tc.name, got.Model, err, tc.sonnet)
			}
		}
		if n := startsOf(t, starts); n != 1 {
			t.Errorf("%s: %d CLI processes asked, want 1", tc.name, n)
		}
	}
}

// TestCLIVersion: the version comes from the npm package the binary is in, beside it or one level up
// (bin/), through a symlink; another package's is not the CLI's.
func TestCLIVersion(t *testing.T) {
	dir := t.TempDir()
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "platform", "claude"), "")
	write(filepath.Join(dir, "platform", "package.json"), `{"name":"@anthropic-ai/claude-code-linux-x64","version":"1.2.3"}`)
	write(filepath.Join(dir, "wrapper", "bin", "claude.exe"), "")
	write(filepath.Join(dir, "wrapper", "package.json"), `{"name":"@anthropic-ai/claude-code","version":"4.5.6"}`)
	write(filepath.Join(dir, "other", "claude"), "")
	write(filepath.Join(dir, "other", "package.json"), `{"name":"claude-imposter","version":"1.2.3"}`)
	write(filepath.Join(dir, "bare", "claude"), "")
	if err := os.Symlink(filepath.Join(dir, "wrapper", "bin", "claude.exe"), filepath.Join(dir, "claude")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"platform/claude": "1.2.3", "wrapper/bin/claude.exe": "4.5.6", "claude": "4.5.6", "other/claude": "", "bare/claude": "", "missing": "",
	} {
		if got := cliVersion(filepath.Join(dir, path)); got != want {
			t.Errorf("cliVersion(%s) = %q, want %q", path, got, want)
		}
	}
}
