package file_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
)

func openStore(t testing.TB, path string) *file.Store {
	t.Helper()
	s, err := file.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func tempPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "data", file.DefaultFileName)
}

func keyIDs(t testing.TB, s secrets.Store, iss string) []string {
	t.Helper()
	keys, err := s.IssuerKeys(context.Background(), iss)
	if err != nil {
		t.Fatalf("IssuerKeys(%q): %v", iss, err)
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return ids
}

func TestMissingFileIsEmpty(t *testing.T) {
	s := openStore(t, tempPath(t))
	_, err := s.IssuerKeys(context.Background(), "dev")
	if !errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("IssuerKeys on empty store: %v, want ErrUnknownIssuer", err)
	}
}

func TestCreateRotateEnsure(t *testing.T) {
	path := tempPath(t)
	s := openStore(t, path)

	k1, err := s.CreateIssuer("acme")
	if err != nil {
		t.Fatalf("CreateIssuer: %v", err)
	}
	if k1.ID != "acme-v1" || k1.Form != secrets.FormText || !secrets.ValidTextSecret(string(k1.Secret)) {
		t.Fatalf("first key = %q, form %v, want acme-v1 with a text secret", k1.ID, k1.Form)
	}
	if raw, err := os.ReadFile(path); err != nil || !strings.Contains(string(raw), `"secret": "`+string(k1.Secret)+`"`) {
		t.Fatalf("the file does not hold the text secret as handed out (%v)", err)
	}
	if _, err := s.CreateIssuer("acme"); !errors.Is(err, file.ErrIssuerExists) {
		t.Fatalf("second CreateIssuer: %v, want ErrIssuerExists", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("file mode %v, want 0600", perm)
	}

	k2, err := s.Rotate("acme")
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if k2.ID != "acme-v2" || string(k2.Secret) == string(k1.Secret) {
		t.Fatalf("rotated key %q, want acme-v2 with a new secret", k2.ID)
	}
	if got := keyIDs(t, s, "acme"); strings.Join(got, ",") != "acme-v2,acme-v1" {
		t.Fatalf("keys = %v, want newest first [acme-v2 acme-v1]", got)
	}
	if _, err := s.Rotate("nobody"); !errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("Rotate unknown: %v, want ErrUnknownIssuer", err)
	}

	cur, created, err := s.EnsureIssuer("acme")
	if err != nil || created || cur.ID != "acme-v2" || string(cur.Secret) != string(k2.Secret) {
		t.Fatalf("EnsureIssuer existing = %q, %v, %v; want acme-v2, false", cur.ID, created, err)
	}
	dev, created, err := s.EnsureIssuer("dev")
	if err != nil || !created || dev.ID != "dev-v1" {
		t.Fatalf("EnsureIssuer new = %q, %v, %v; want dev-v1, true", dev.ID, created, err)
	}

	// A fresh Open reads back exactly what was written.
	keys, err := openStore(t, path).IssuerKeys(context.Background(), "acme")
	if err != nil || len(keys) != 2 || string(keys[0].Secret) != string(k2.Secret) || string(keys[1].Secret) != string(k1.Secret) {
		t.Fatalf("reopened keys = %v, %v", len(keys), err)
	}
}

func TestInvalidIssuer(t *testing.T) {
	s := openStore(t, tempPath(t))
	for _, iss := range []string{"", "a\nb", "tab\there", "nul\x00", strings.Repeat("x", 257), "bidi\u202e", "bad\xffutf8"} {
		t.Run(fmt.Sprintf("%q", iss), func(t *testing.T) {
			if _, err := s.CreateIssuer(iss); !errors.Is(err, file.ErrInvalidIssuer) {
				t.Fatalf("CreateIssuer: %v, want ErrInvalidIssuer", err)
			}
		})
	}
}

// Two stores on one file stand for `warren dev` and `warren token` in two processes.
func TestReloadAcrossInstances(t *testing.T) {
	path := tempPath(t)
	a := openStore(t, path)
	b := openStore(t, path)

	if _, err := a.CreateIssuer("dev"); err != nil {
		t.Fatal(err)
	}
	if got := keyIDs(t, b, "dev"); len(got) != 1 || got[0] != "dev-v1" {
		t.Fatalf("b sees %v after a created dev", got)
	}
	if _, err := b.Rotate("dev"); err != nil {
		t.Fatal(err)
	}
	if got := keyIDs(t, a, "dev"); len(got) != 2 || got[0] != "dev-v2" {
		t.Fatalf("a sees %v after b rotated", got)
	}
	// a's next write starts from b's version, not its own stale copy.
	if k, err := a.Rotate("dev"); err != nil || k.ID != "dev-v3" {
		t.Fatalf("a.Rotate = %q, %v; want dev-v3", k.ID, err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := a.IssuerKeys(context.Background(), "dev"); !errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("after the file was removed: %v, want ErrUnknownIssuer", err)
	}
}

func TestCorruptFile(t *testing.T) {
	tests := []struct {
		name, content string
	}{
		{"not json", "{"},
		{"unknown field", `{"version":1,"issuers":{},"extra":1}`},
		{"wrong version", `{"version":2,"issuers":{}}`},
		{"bad base64", `{"version":1,"issuers":{"dev":[{"id":"dev-v1","version":1,"secret":"%%%"}]}}`},
		{"empty secret", `{"version":1,"issuers":{"dev":[{"id":"dev-v1","version":1,"secret":""}]}}`},
		{"short text secret", `{"version":1,"issuers":{"dev":[{"id":"dev-v1","version":1,"secret":"wsk_abc"}]}}`},
		{"text secret alphabet", `{"version":1,"issuers":{"dev":[{"id":"dev-v1","version":1,"secret":"wsk_` + strings.Repeat("a", 42) + `/"}]}}`},
		{"text secret is never base64", `{"version":1,"issuers":{"dev":[{"id":"dev-v1","version":1,"secret":"wsk_` + strings.Repeat("A", 40) + `=="}]}}`},
		{"duplicate id", `{"version":1,"issuers":{"dev":[{"id":"k","version":2,"secret":"YQ=="},{"id":"k","version":1,"secret":"YQ=="}]}}`},
		{"duplicate version", `{"version":1,"issuers":{"dev":[{"id":"a","version":1,"secret":"YQ=="},{"id":"b","version":1,"secret":"YQ=="}]}}`},
		{"bad issuer", `{"version":1,"issuers":{"":[{"id":"a","version":1,"secret":"YQ=="}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := file.Open(path); !errors.Is(err, file.ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
		})
	}

	t.Run("after open", func(t *testing.T) {
		path := tempPath(t)
		s := openStore(t, path)
		if _, err := s.CreateIssuer("dev"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("{garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.IssuerKeys(context.Background(), "dev")
		if !errors.Is(err, secrets.ErrUnavailable) {
			t.Fatalf("IssuerKeys on a corrupted file: %v, want ErrUnavailable", err)
		}
	})
}

func TestOrderIsByVersion(t *testing.T) {
	path := tempPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	// Hand-edited file, oldest first: the store still answers newest first and rotates to v3.
	content := `{"version":1,"issuers":{"dev":[{"id":"dev-v1","version":1,"secret":"YQ=="},{"id":"dev-v2","version":2,"secret":"Yg=="}]}}`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path)
	if got := keyIDs(t, s, "dev"); strings.Join(got, ",") != "dev-v2,dev-v1" {
		t.Fatalf("keys = %v, want [dev-v2 dev-v1]", got)
	}
	if k, err := s.Rotate("dev"); err != nil || k.ID != "dev-v3" {
		t.Fatalf("Rotate = %q, %v; want dev-v3", k.ID, err)
	}
}

// Concurrent rotations through two instances (two open file descriptions, so the flock really arbitrates)
// lose no version.
func TestConcurrentRotate(t *testing.T) {
	path := tempPath(t)
	stores := []*file.Store{openStore(t, path), openStore(t, path)}
	if _, err := stores[0].CreateIssuer("dev"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := stores[i%2].Rotate("dev"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Rotate: %v", err)
	}
	ids := keyIDs(t, stores[1], "dev")
	if len(ids) != n+1 || ids[0] != fmt.Sprintf("dev-v%d", n+1) {
		t.Fatalf("after %d rotations: %d keys, newest %q", n, len(ids), ids[0])
	}
}

func TestCancelledContext(t *testing.T) {
	s := openStore(t, tempPath(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.IssuerKeys(ctx, "dev"); !errors.Is(err, context.Canceled) {
		t.Fatalf("IssuerKeys with a cancelled context: %v", err)
	}
}

// A file written before text secrets (standard base64 keys) keeps verifying with the decoded bytes, and a
// rotation adds a text secret on top of the legacy key, which stays the previous one.
func TestLegacyBase64Keys(t *testing.T) {
	path := tempPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	legacy := []byte("0123456789abcdef0123456789abcdef")
	content := `{"version":1,"issuers":{"acme":[{"id":"acme-v1","version":1,"secret":"` + base64.StdEncoding.EncodeToString(legacy) + `"}]}}`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path)
	keys, err := s.IssuerKeys(context.Background(), "acme")
	if err != nil || len(keys) != 1 || keys[0].Form != secrets.FormBase64 || !bytes.Equal(keys[0].Secret, legacy) {
		t.Fatalf("legacy key = %v, %v; want the decoded bytes, form base64", keys, err)
	}
	k2, err := s.Rotate("acme")
	if err != nil || k2.Form != secrets.FormText {
		t.Fatalf("Rotate over a legacy key = %v, %v; want a text secret", k2, err)
	}
	keys, err = openStore(t, path).IssuerKeys(context.Background(), "acme")
	if err != nil || len(keys) != 2 || keys[0].Form != secrets.FormText || !bytes.Equal(keys[0].Secret, k2.Secret) ||
		keys[1].Form != secrets.FormBase64 || !bytes.Equal(keys[1].Secret, legacy) {
		t.Fatalf("after rotation = %v, %v; want [text acme-v2, base64 acme-v1]", keys, err)
	}
}
