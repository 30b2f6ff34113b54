package templates

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/wire"
)

func newStore(t *testing.T) (*Store, *blobfs.Store) {
	t.Helper()
	blobs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Blobs: blobs, TempDir: t.TempDir(), Limits: Limits{MaxFiles: 10, MaxBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	return s, blobs
}

func countObjects(t *testing.T, blobs *blobfs.Store, prefix string) int {
	t.Helper()
	n := 0
	for _, err := range blobs.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func restored(t *testing.T, s *Store, issuer, name string) (string, map[string]string) {
	t.Helper()
	ws := t.TempDir()
	v, _, ok, err := Restore(context.Background(), RestoreConfig{Store: s.cfg.Blobs, Issuer: issuer, Name: name, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "", nil
	}
	files := map[string]string{}
	err = filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, rerr := os.ReadFile(p)
			rel, _ := filepath.Rel(ws, p)
			files[rel] = string(b)
			return rerr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v, files
}

// TestDeployVersions deploys, redeploys the same tree (no new blobs), deploys a change, lists, rolls back
// and deletes, checking what a new sandbox would restore after each step.
func TestDeployVersions(t *testing.T) {
	ctx := context.Background()
	s, blobs := newStore(t)
	const iss = "acme"
	if v, files := restored(t, s, iss, DefaultName); v != "" || files != nil {
		t.Fatalf("restored %q %v before any deploy", v, files)
	}
	tree1 := makeTar(t, entry{name: "a.txt", body: "one"}, entry{name: "lib/b.txt", body: "shared"})
	v1, err := s.Deploy(ctx, iss, DefaultName, bytes.NewReader(tree1))
	if err != nil {
		t.Fatal(err)
	}
	if v1.ID != "1" || v1.Files != 2 || v1.UploadedFiles != 2 {
		t.Errorf("first deploy %+v", v1)
	}
	blobsAfter1 := countObjects(t, blobs, Prefix(iss, DefaultName)+"/blobs/")
	// The same tree again: a new version, no new content.
	v2, err := s.Deploy(ctx, iss, DefaultName, bytes.NewReader(tree1))
	if err != nil {
		t.Fatal(err)
	}
	if v2.ID != "2" || v2.UploadedFiles != 0 || v2.UploadedBytes != 0 {
		t.Errorf("identical deploy uploaded: %+v", v2)
	}
	if n := countObjects(t, blobs, Prefix(iss, DefaultName)+"/blobs/"); n != blobsAfter1 {
		t.Errorf("blobs %d after an identical deploy, %d before", n, blobsAfter1)
	}
	// A change: only the changed file is uploaded.
	v3, err := s.Deploy(ctx, iss, DefaultName, bytes.NewReader(makeTar(t, entry{name: "a.txt", body: "three"}, entry{name: "lib/b.txt", body: "shared"})))
	if err != nil {
		t.Fatal(err)
	}
	if v3.ID != "3" || v3.UploadedFiles != 1 {
		t.Errorf("third deploy %+v", v3)
	}
	if v, files := restored(t, s, iss, DefaultName); v != "3" || files["a.txt"] != "three" || files["lib/b.txt"] != "shared" {
		t.Errorf("restored %q %v", v, files)
	}
	vs, err := s.List(ctx, iss, DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[0].ID != "3" || !vs[0].Current || vs[2].ID != "1" || vs[2].Current {
		t.Errorf("versions %+v", vs)
	}
	// Rollback to 1: a new version 4 with 1's tree.
	u, err := s.Use(ctx, iss, DefaultName, "1")
	if err != nil {
		t.Fatal(err)
	}
	if u.ID != "4" || !u.Current {
		t.Errorf("use: %+v", u)
	}
	if v, files := restored(t, s, iss, DefaultName); v != "4" || files["a.txt"] != "one" {
		t.Errorf("after rollback restored %q %v", v, files)
	}
	if _, err := s.Use(ctx, iss, DefaultName, "9"); wire.CodeOf(err) != wire.NotFound {
		t.Errorf("use of a missing version: %v", err)
	}
	if _, err := s.Use(ctx, iss, DefaultName, "../1"); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("use of a bad version id: %v", err)
	}
	// Another issuer's and another name's templates are separate.
	if v, _ := restored(t, s, "other", DefaultName); v != "" {
		t.Errorf("other issuer restored %q", v)
	}
	if v, _ := restored(t, s, iss, "py"); v != "" {
		t.Errorf("other name restored %q", v)
	}
	if err := s.Delete(ctx, iss, DefaultName); err != nil {
		t.Fatal(err)
	}
	if n := countObjects(t, blobs, Prefix(iss, DefaultName)+"/"); n != 0 {
		t.Errorf("%d objects left after delete", n)
	}
	if v, _ := restored(t, s, iss, DefaultName); v != "" {
		t.Errorf("restored %q after delete", v)
	}
	if err := s.Delete(ctx, iss, DefaultName); wire.CodeOf(err) != wire.NotFound {
		t.Errorf("second delete: %v", err)
	}
	if _, err := s.List(ctx, iss, DefaultName); wire.CodeOf(err) != wire.NotFound {
		t.Errorf("list after delete: %v", err)
	}
}

// TestDeployRefusedStoresNothing: a hostile archive and bad names leave the store empty.
func TestDeployRefusedStoresNothing(t *testing.T) {
	ctx := context.Background()
	s, blobs := newStore(t)
	evil := makeTar(t, entry{name: "ok.txt", body: "fine"}, entry{name: "../../etc/cron.d/x", body: "evil"})
	if _, err := s.Deploy(ctx, "acme", DefaultName, bytes.NewReader(evil)); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("hostile tar: %v", err)
	}
	for _, name := range []string{"", "../x", "A", ".hidden", strings.Repeat("a", 65), "a/b"} {
		if _, err := s.Deploy(ctx, "acme", name, bytes.NewReader(makeTar(t, entry{name: "f", body: "x"}))); wire.CodeOf(err) != wire.InvalidArgument {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if n := countObjects(t, blobs, ""); n != 0 {
		t.Errorf("%d objects stored by refused deploys", n)
	}
}

// TestAPI drives the admin routes over HTTP, with and without the admin key.
func TestAPI(t *testing.T) {
	s, _ := newStore(t)
	auth := func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer admin" {
			return wire.Errorf(wire.Unauthenticated, "the admin key was rejected")
		}
		return nil
	}
	srv := httptest.NewServer(Handler(s, auth, nil))
	defer srv.Close()
	call := func(method, path, key string, body []byte) (int, map[string]any) {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	tree := makeTar(t, entry{name: "x", body: "y"})
	if code, _ := call("PUT", "/v1/admin/templates/acme/default", "", tree); code != http.StatusUnauthorized {
		t.Errorf("no key: %d", code)
	}
	if code, _ := call("PUT", "/v1/admin/templates/acme/default", "wrong", tree); code != http.StatusUnauthorized {
		t.Errorf("wrong key: %d", code)
	}
	if code, out := call("PUT", "/v1/admin/templates/acme/default", "admin", tree); code != http.StatusCreated || out["version"] != "1" {
		t.Errorf("deploy: %d %v", code, out)
	}
	big := makeTar(t, entry{name: "x", body: strings.Repeat("z", 2<<20)})
	if code, out := call("PUT", "/v1/admin/templates/acme/default", "admin", big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("too large: %d %v", code, out)
	}
	if code, out := call("GET", "/v1/admin/templates/acme/default", "admin", nil); code != http.StatusOK || len(out["versions"].([]any)) != 1 {
		t.Errorf("list: %d %v", code, out)
	}
	if code, out := call("POST", "/v1/admin/templates/acme/default/current", "admin", []byte(`{"version":"1"}`)); code != http.StatusOK || out["version"] != "1" {
		t.Errorf("use current: %d %v", code, out)
	}
	if code, _ := call("DELETE", "/v1/admin/templates/acme/default", "admin", nil); code != http.StatusNoContent {
		t.Errorf("delete: %d", code)
	}
	if code, out := call("GET", "/v1/admin/templates/acme/default", "admin", nil); code != http.StatusNotFound || out["code"] != string(wire.NotFound) {
		t.Errorf("list after delete: %d %v", code, out)
	}
	// Unknown paths and wrong methods: unauthenticated without the key (nothing learnt about what
	// exists), wire errors with it (docs/PROTOCOL.md#errors), never Go's plain text.
	for _, c := range []struct {
		method, path, key string
		code              wire.Code
	}{
		{"GET", "/v1/admin/templates/acme", "", wire.Unauthenticated},
		{"PATCH", "/v1/admin/templates/acme/default", "", wire.Unauthenticated},
		{"GET", "/v1/admin/templates/acme", "admin", wire.NotFound},
		{"GET", "/v1/admin/templates/acme/default/current", "admin", wire.InvalidArgument},
		{"PATCH", "/v1/admin/templates/acme/default", "admin", wire.InvalidArgument},
	} {
		if code, out := call(c.method, c.path, c.key, nil); code != c.code.HTTPStatus() || out["code"] != string(c.code) {
			t.Errorf("%s %s (key %q): %d %v", c.method, c.path, c.key, code, out)
		}
	}
}
