package workspace

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

func TestClean(t *testing.T) {
	tests := []struct {
		in   string
		want string
		code wire.Code // "" when Clean succeeds
		sent error
	}{
		{in: "", want: "."},
		{in: ".", want: "."},
		{in: "./", want: "."},
		{in: "a", want: "a"},
		{in: "a/b/", want: "a/b"},
		{in: "a//b/./c", want: "a/b/c"},
		{in: "a/../b", want: "b"},
		{in: "a/..", want: "."},
		{in: "..x", want: "..x"},
		{in: "a\\..\\..\\b", want: "a\\..\\..\\b"}, // backslash is an ordinary byte on Linux
		{in: "..", code: wire.PermissionDenied, sent: ErrEscapes},
		{in: "../x", code: wire.PermissionDenied, sent: ErrEscapes},
		{in: "a/../../x", code: wire.PermissionDenied, sent: ErrEscapes},
		{in: "./../x", code: wire.PermissionDenied, sent: ErrEscapes},
		{in: "/etc/passwd", code: wire.PermissionDenied, sent: ErrEscapes},
		{in: "/", code: wire.PermissionDenied, sent: ErrEscapes},
		{in: "//x", code: wire.PermissionDenied, sent: ErrEscapes},
		{in: "a\x00b", code: wire.InvalidArgument, sent: ErrInvalidPath},
		{in: "a\xffb", code: wire.InvalidArgument, sent: ErrInvalidPath},
		{in: strings.Repeat("a/", MaxPathLen), code: wire.InvalidArgument, sent: ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Clean(tt.in)
			if tt.code == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Clean(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Clean(%q) = %q; want a %s error", tt.in, got, tt.code)
			}
			if c := wire.CodeOf(err); c != tt.code {
				t.Errorf("code = %s, want %s (%v)", c, tt.code, err)
			}
			if !errors.Is(err, tt.sent) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.sent)
			}
		})
	}
}

// FuzzClean checks Clean's contract: a result never escapes the root, and every failure is a typed error.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"", ".", "a/b", "../x", "a/../../x", "/etc/passwd", "a\x00b", "a/./b/../c", "...", "a/..", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := Clean(p)
		if err != nil {
			if c := wire.CodeOf(err); c != wire.InvalidArgument && c != wire.PermissionDenied {
				t.Fatalf("Clean(%q): code %s, want invalid_argument or permission_denied", p, c)
			}
			return
		}
		if !filepath.IsLocal(got) {
			t.Fatalf("Clean(%q) = %q, which is not local", p, got)
		}
		if strings.ContainsRune(got, 0) || strings.HasPrefix(got, "/") {
			t.Fatalf("Clean(%q) = %q", p, got)
		}
		for _, el := range strings.Split(got, "/") {
			if el == ".." || el == "" || (el == "." && got != ".") {
				t.Fatalf("Clean(%q) = %q has element %q", p, got, el)
			}
		}
		const base = "/srv/ws"
		if j := filepath.Join(base, got); j != base && !strings.HasPrefix(j, base+"/") {
			t.Fatalf("Clean(%q) = %q joins to %q, outside %s", p, got, j, base)
		}
		if again, err := Clean(got); err != nil || again != got {
			t.Fatalf("Clean is not idempotent: Clean(%q) = %q, %v", got, again, err)
		}
	})
}
