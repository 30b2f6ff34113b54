package tasks

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

func TestDiffListings(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("keep.txt", "same")
	write("edit.txt", "old")
	write("gone/old.txt", "x")
	before := listWorkspace(dir)
	write("edit.txt", "new content")
	write("sub/new.txt", "n")
	if err := os.RemoveAll(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	changes, truncated := diffListings(before, listWorkspace(dir))
	want := []FileChange{{Path: "edit.txt", Change: "modified"}, {Path: "gone/old.txt", Change: "deleted"},
		{Path: "link", Change: "created"}, {Path: "sub/new.txt", Change: "created"}}
	if truncated || len(changes) != len(want) {
		t.Fatalf("changes %+v (truncated %v), want %+v", changes, truncated, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %+v, want %+v", changes, want)
		}
	}
	// An incomplete listing reports no deletions (a path may just not have been reached) and says so.
	after := listWorkspace(dir)
	after.complete = false
	delete(after.files, "keep.txt")
	if changes, truncated := diffListings(listWorkspace(dir), after); !truncated || len(changes) != 0 {
		t.Fatalf("incomplete listing: %+v, %v", changes, truncated)
	}
}

func TestDiffListingsBounded(t *testing.T) {
	after := workspaceListing{files: map[string]fileState{}, complete: true}
	for i := range maxFilesChanged + 10 {
		after.files[strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String()] = fileState{size: 1}
	}
	changes, truncated := diffListings(workspaceListing{files: map[string]fileState{}, complete: true}, after)
	if len(changes) != maxFilesChanged || !truncated {
		t.Fatalf("%d changes, truncated %v", len(changes), truncated)
	}
}

func testTaskTable() *Table {
	return &Table{cfg: Options{WebhookSecret: []byte("0123456789abcdef0123")}.withDefaults()}
}

func TestParseExecuteRequest(t *testing.T) {
	tt := testTaskTable()
	req, opts, timeout, err := tt.parseExecuteRequest([]byte(`{"prompt":"hi","options":{"model":"claude-sonnet-4-5","maxTurns":3},"timeoutMs":5000,"webhook":{"url":"https://hooks.example.com/x"}}`))
	if err != nil || req.Prompt != "hi" || timeout != 5*time.Second || !strings.Contains(string(opts), `"maxTurns":3`) {
		t.Fatalf("%+v %s %v %v", req, opts, timeout, err)
	}
	for _, body := range []string{
		``, `{}`, `{"prompt":" "}`, `{"prompt":"x","extra":1}`, `{"prompt":"x"} {}`, `[]`,
		`{"prompt":"x","options":{"sessionId":"s"}}`, `{"prompt":"x","options":{"resume":"s"}}`,
		`{"prompt":"x","options":{"continue":true}}`, `{"prompt":"x","options":{"lastSeq":3}}`,
		`{"prompt":"x","options":{"nope":1}}`, `{"prompt":"x","timeoutMs":-1}`, `{"prompt":"x","timeoutMs":99999999999}`,
		`{"prompt":"x","timeoutMs":9223372036854775807}`, `{"prompt":"x","timeoutMs":9223372036854}`,
		`{"prompt":"x","webhook":{"url":"http://10.0.0.1/"}}`, `{"prompt":"x","webhook":{"url":"https://169.254.169.254/"}}`,
	} {
		if _, _, _, err := tt.parseExecuteRequest([]byte(body)); wire.CodeOf(err) != wire.InvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", body, err)
		}
	}
	// Without a configured secret, webhooks are refused.
	noSecret := &Table{cfg: Options{}.withDefaults()}
	if _, _, _, err := noSecret.parseExecuteRequest([]byte(`{"prompt":"x","webhook":{"url":"https://hooks.example.com/"}}`)); wire.CodeOf(err) != wire.InvalidArgument {
		t.Fatalf("webhook without a secret: %v", err)
	}
}

func TestTaskIDsAndKeys(t *testing.T) {
	for range 100 {
		if id := newTaskID(); !validTaskID(id) {
			t.Fatalf("newTaskID made %q", id)
		}
	}
	for _, id := range []string{"", "t-", "t-../../x", "T-AAAAAAAAAAAAAAAAAAAAAAAAAA", "t-aaaaaaaaaaaaaaaaaaaaaaaaa1", "t-aaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		if validTaskID(id) {
			t.Errorf("validTaskID(%q)", id)
		}
	}
	for _, k := range []string{"a b", "é", strings.Repeat("k", maxIdempotencyKey+1), "tab\t"} {
		if checkIdempotencyKey(k) == nil {
			t.Errorf("idempotency key %q accepted", k)
		}
	}
	if checkIdempotencyKey("order-42:retry/1") != nil {
		t.Error("a plain key refused")
	}
}

func FuzzParseExecuteRequest(f *testing.F) {
	for _, s := range []string{`{"prompt":"hi"}`, `{"prompt":"x","options":{"maxTurns":2},"wait":true}`,
		`{"prompt":"x","webhook":{"url":"https://h.example/"}}`, `{"prompt":1}`} {
		f.Add([]byte(s))
	}
	tt := testTaskTable()
	f.Fuzz(func(t *testing.T, b []byte) {
		req, opts, timeout, err := tt.parseExecuteRequest(b)
		if err != nil {
			if c := wire.CodeOf(err); c != wire.InvalidArgument {
				t.Fatalf("%q: %v", b, err)
			}
			return
		}
		if strings.TrimSpace(req.Prompt) == "" || timeout <= 0 || timeout > tt.cfg.MaxTimeout || !json.Valid(opts) {
			t.Fatalf("%q accepted: %+v %s %v", b, req, opts, timeout)
		}
	})
}
