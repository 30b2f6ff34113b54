package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/runner/templates"
)

func tarOf(t *testing.T, files map[string]string) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

// A new sandbox starts from its issuer's template; once it has a snapshot of its own, a later deploy does
// not reach it, even across a restart; another template name, or none, is honoured.
func TestNewSandboxStartsFromTemplate(t *testing.T) {
	ctx := context.Background()
	blobs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts, err := templates.New(templates.Config{Blobs: blobs, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Deploy(ctx, "acme", templates.DefaultName, tarOf(t, map[string]string{"v1.txt": "one"})); err != nil {
		t.Fatal(err)
	}
	start := func(user string, epoch int64, template string) *Runner {
		t.Helper()
		base := t.TempDir()
		r, err := New(Config{
			Issuer: "acme", User: user, Epoch: epoch, Listen: "127.0.0.1:0", Key: "k", Insecure: true,
			Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"),
			Snapshots: blobs, SnapshotPrefix: "sandboxes/" + user, Template: template,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.restore(ctx); err != nil {
			t.Fatal(err)
		}
		return r
	}
	has := func(r *Runner, name string) bool {
		_, err := os.Stat(filepath.Join(r.cfg.Workspace, name))
		return err == nil
	}
	restores := func(r *Runner, result string) float64 {
		mfs, err := r.metrics.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "warren_runner_template_restores_total" {
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == result {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}

	alice := start("alice", 1, "")
	if !has(alice, "v1.txt") || restores(alice, "restored") != 1 {
		t.Fatalf("a new sandbox did not start from the template (restored=%v)", restores(alice, "restored"))
	}
	if err := os.WriteFile(filepath.Join(alice.cfg.Workspace, "own.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	alice.snapshot(ctx, "test")
	if _, err := ts.Deploy(ctx, "acme", templates.DefaultName, tarOf(t, map[string]string{"v2.txt": "two"})); err != nil {
		t.Fatal(err)
	}
	again := start("alice", 2, "")
	if !has(again, "own.txt") || !has(again, "v1.txt") || has(again, "v2.txt") || restores(again, "restored") != 0 {
		t.Fatal("a sandbox with its own snapshot was changed by a later deploy")
	}
	if bob := start("bob", 1, ""); !has(bob, "v2.txt") || has(bob, "v1.txt") {
		t.Fatal("the next new sandbox did not get the new version")
	}
	if carol := start("carol", 1, "-"); has(carol, "v2.txt") || restores(carol, "restored")+restores(carol, "none") != 0 {
		t.Fatal("template - restored a template")
	}
	if dave := start("dave", 1, "python"); has(dave, "v2.txt") || restores(dave, "none") != 1 {
		t.Fatal("another template name restored the default")
	}
	if _, err := New(Config{Issuer: "acme", User: "x", Listen: "127.0.0.1:0", Key: "k", Insecure: true,
		Workspace: filepath.Join(t.TempDir(), "ws"), Template: "../etc"}); err == nil {
		t.Fatal("a bad template name was accepted")
	}
}
