package file_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
)

func adminKeys(t testing.TB, s *file.Store) []string {
	t.Helper()
	keys, err := s.AdminKeys(context.Background())
	if err != nil {
		t.Fatalf("AdminKeys: %v", err)
	}
	return keys
}

func TestEnsureAdminKey(t *testing.T) {
	path := tempPath(t)
	s := openStore(t, path)
	if got := adminKeys(t, s); len(got) != 0 {
		t.Fatalf("admin keys of an empty store: %d", len(got))
	}
	key, created, err := s.EnsureAdminKey()
	if err != nil || !created || !strings.HasPrefix(key, "wak_") || len(key) < 40 {
		t.Fatalf("EnsureAdminKey = %d-byte key, %v, %v; want a new wak_ key", len(key), created, err)
	}
	again, created, err := s.EnsureAdminKey()
	if err != nil || created || again != key {
		t.Fatalf("second EnsureAdminKey created %v (%v); want the same key", created, err)
	}
	// Another process (another Store) sees it, and issuer keys live beside it untouched.
	if _, err := s.CreateIssuer("dev"); err != nil {
		t.Fatal(err)
	}
	other := openStore(t, path)
	if got := adminKeys(t, other); len(got) != 1 || got[0] != key {
		t.Fatalf("another store reads %d admin keys", len(got))
	}
	if got := keyIDs(t, other, "dev"); len(got) != 1 {
		t.Fatalf("dev keys %v", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets file mode %v, %v", fi.Mode().Perm(), err)
	}
}

// A file written before admin keys existed reads as before, and stays free of an admin_keys field until
// one is created.
func TestAdminKeysKeepOldFormat(t *testing.T) {
	path := tempPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	old := `{"version":1,"issuers":{"dev":[{"id":"dev-v1","version":1,"secret":"YQ=="}]}}`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path)
	if got := adminKeys(t, s); len(got) != 0 {
		t.Fatalf("admin keys of an old file: %d", len(got))
	}
	if _, err := s.Rotate("dev"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "admin_keys") {
		t.Fatalf("a rotation added admin_keys to the file:\n%s", data)
	}
}

func TestAdminKeysFromHandEditedFile(t *testing.T) {
	for _, tt := range []struct {
		name, keys string
		want       []string // nil: corrupt
	}{
		{"ordered by version", `[{"id":"a1","version":1,"key":"old"},{"id":"a2","version":2,"key":"new"}]`, []string{"new", "old"}},
		{"empty key", `[{"id":"a1","version":1,"key":""}]`, nil},
		{"no id", `[{"version":1,"key":"k"}]`, nil},
		{"duplicate id", `[{"id":"a","version":2,"key":"k"},{"id":"a","version":1,"key":"j"}]`, nil},
		{"duplicate version", `[{"id":"a","version":1,"key":"k"},{"id":"b","version":1,"key":"j"}]`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(`{"version":1,"issuers":{},"admin_keys":`+tt.keys+`}`), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := file.Open(path)
			if tt.want == nil {
				if !errors.Is(err, file.ErrCorrupt) {
					t.Fatalf("Open: %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := adminKeys(t, s); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("admin keys %v, want %v", got, tt.want)
			}
			if key, created, err := s.EnsureAdminKey(); err != nil || created || key != tt.want[0] {
				t.Fatalf("EnsureAdminKey = %q, %v, %v; want the newest", key, created, err)
			}
		})
	}
}

func TestAdminKeysUnavailable(t *testing.T) {
	path := tempPath(t)
	s := openStore(t, path)
	if _, _, err := s.EnsureAdminKey(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdminKeys(context.Background()); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("AdminKeys on a corrupted file: %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.AdminKeys(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("AdminKeys with a cancelled context: %v", err)
	}
}
