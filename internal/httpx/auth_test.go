package httpx

import (
	"strings"
	"testing"
)

func TestBearer(t *testing.T) {
	for _, c := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER abc", "abc", true},
		{"bEaReR abc", "abc", true},
		{"Bearer   abc  ", "abc", true},
		{"Bearer\tabc", "abc", true},
		{"Bearer a.b-c_d~e+f/g==", "a.b-c_d~e+f/g==", true},
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer    ", "", false},
		{"Bearerabc", "", false},
		{"Basic abc", "", false},
		{"Token abc", "", false},
		{"abc", "", false},
		{" Bearer abc", "", false},
		{"Bearer a b", "", false},
		{"Bearer a\x00b", "", false},
		{"Bearer a\x7fb", "", false},
		{"Bearer a\nb", "", false},
	} {
		tok, ok := Bearer(c.header)
		if tok != c.token || ok != c.ok {
			t.Errorf("Bearer(%q) = %q, %v; want %q, %v", c.header, tok, ok, c.token, c.ok)
		}
	}
}

func TestKeyEqual(t *testing.T) {
	for _, c := range []struct {
		got, want string
		ok        bool
	}{
		{"k1", "k1", true},
		{"k1", "k2", false},
		{"k", "k1", false},
		{"k1", "k", false},
		{"K1", "k1", false},
		{"", "", false}, // no key configured: nothing matches, not even nothing
		{"k1", "", false},
		{"", "k1", false},
	} {
		if got := KeyEqual(c.got, c.want); got != c.ok {
			t.Errorf("KeyEqual(%q, %q) = %v", c.got, c.want, got)
		}
	}
}

func TestKeyIn(t *testing.T) {
	keys := []string{"", "first", "second"}
	for _, c := range []struct {
		got string
		ok  bool
	}{{"first", true}, {"second", true}, {"", false}, {"third", false}, {"firs", false}, {"SECOND", false}} {
		if got := KeyIn(c.got, keys); got != c.ok {
			t.Errorf("KeyIn(%q) = %v", c.got, got)
		}
	}
	if KeyIn("x", nil) || KeyIn("", []string{""}) {
		t.Error("no keys, or only empty ones, must match nothing")
	}
}

// FuzzBearer: whatever the header, a token comes back only under the rule: a case-insensitive "Bearer",
// whitespace, then a non-empty token with no whitespace or control character, which is the header's
// content after the scheme.
func FuzzBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x ", "Basic abc", "Bearer", "Bearer\t\tq", "BEARER a b", "Bearer \x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := Bearer(h)
		if !ok {
			if tok != "" {
				t.Fatalf("refused %q but returned %q", h, tok)
			}
			return
		}
		if len(h) < 7 || !strings.EqualFold(h[:6], "bearer") || (h[6] != ' ' && h[6] != '\t') {
			t.Fatalf("accepted %q without the scheme", h)
		}
		if tok == "" || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			t.Fatalf("accepted %q: token %q", h, tok)
		}
		if strings.Trim(h[6:], " \t") != tok {
			t.Fatalf("token %q is not the rest of %q", tok, h)
		}
	})
}
