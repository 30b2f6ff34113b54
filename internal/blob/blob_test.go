package blob_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/blob"
)

func TestCheckKey(t *testing.T) {
	valid := []string{"a", "A-Z_a.z-0.9", ".hidden/.x", "a/b/c", "...", "a/.../b", strings.Repeat("k", 1024)}
	invalid := []string{"", "/", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "a b", "é", "a\x00", strings.Repeat("k", 1025)}
	for _, k := range valid {
		if err := blob.CheckKey(k); err != nil {
			t.Errorf("CheckKey(%.40q) = %v, want nil", k, err)
		}
	}
	for _, k := range invalid {
		if err := blob.CheckKey(k); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("CheckKey(%.40q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

// FuzzCheckKey checks CheckKey against the rules restated independently: whatever it accepts is a
// relative slash-separated path of allowed bytes that no path cleaning changes.
func FuzzCheckKey(f *testing.F) {
	for _, k := range []string{"a", "a/b", "", "/", "a//b", "..", "a/./b", "a\\b", "é", "a#", strings.Repeat("k", 1025)} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := blob.CheckKey(key)
		if err != nil {
			if !errors.Is(err, blob.ErrInvalidKey) {
				t.Fatalf("CheckKey(%q) = %v, not ErrInvalidKey", key, err)
			}
			return
		}
		if key == "" || len(key) > blob.MaxKeyLen {
			t.Fatalf("CheckKey accepted a key of %d bytes", len(key))
		}
		if strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") != "" {
			t.Fatalf("CheckKey accepted %q with a disallowed byte", key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("CheckKey accepted %q with segment %q", key, seg)
			}
		}
	})
}
