package tasks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListWorkspaceStaysInside races the walk the way a tenant's command can: a directory the walk has
// listed is swapped for a symlink to a host directory (absolute, and relative through ..) before the walk
// reads it. The listing, made by the runner on the host as root, must name nothing of the host's
// directory.
func TestListWorkspaceStaysInside(t *testing.T) {
	for _, target := range []string{"abs", "rel"} {
		t.Run(target, func(t *testing.T) {
			base := t.TempDir()
			ws, host := filepath.Join(base, "ws"), filepath.Join(base, "host")
			for _, d := range []string{filepath.Join(ws, "a"), host} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(host, "host-secret.txt"), []byte("s"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, "a", "mine.txt"), []byte("m"), 0o644); err != nil {
				t.Fatal(err)
			}
			link := host
			if target == "rel" {
				link = "../host"
			}
			swapped := false
			walkHook = func(rel string) {
				if rel != "a" {
					return
				}
				if err := os.Rename(filepath.Join(ws, "a"), filepath.Join(ws, "b")); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(link, filepath.Join(ws, "a")); err != nil {
					t.Error(err)
				}
				swapped = true
			}
			defer func() { walkHook = nil }()
			l := listWorkspace(ws)
			if !swapped {
				t.Fatal("the walk never reached a/")
			}
			for p := range l.files {
				if strings.Contains(p, "host-secret") {
					t.Fatalf("the walk followed the swapped symlink out of the workspace: %q in %v", p, l.files)
				}
			}
			// Nothing else is lost: the symlink itself is listed when walked afresh.
			if _, ok := listWorkspace(ws).files["a"]; !ok {
				t.Fatalf("the symlink a is not listed")
			}
		})
	}
}
