package vault

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/secrets"
)

// decodeSegment inverts issuerSegment, to check that the mapping is one-to-one.
func decodeSegment(seg string) (string, bool) {
	if rest, ok := strings.CutPrefix(seg, "~"); ok {
		b, err := base64.RawURLEncoding.DecodeString(rest)
		return string(b), err == nil
	}
	return seg, plainSegment(seg)
}

var safeSegment = regexp.MustCompile(`^[A-Za-z0-9~][A-Za-z0-9._~-]*$`)

func checkSegment(t *testing.T, issuer string) {
	t.Helper()
	seg, err := issuerSegment(issuer)
	if !secrets.ValidIssuer(issuer) {
		if !errors.Is(err, ErrInvalidIssuer) || seg != "" {
			t.Fatalf("invalid issuer %q: segment %q, %v", issuer, seg, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("issuer %q: %v", issuer, err)
	}
	if !safeSegment.MatchString(seg) || seg == "." || seg == ".." || strings.Contains(seg, "/") {
		t.Fatalf("issuer %q: unsafe path segment %q", issuer, seg)
	}
	if back, ok := decodeSegment(seg); !ok || back != issuer {
		t.Fatalf("issuer %q: segment %q decodes to %q (%v)", issuer, seg, back, ok)
	}
}

func TestIssuerSegment(t *testing.T) {
	for _, tt := range []struct{ issuer, want string }{
		{"acme", "acme"},
		{"acme-prod.eu_1", "acme-prod.eu_1"},
		{"A", "A"},
		{"a/b", "~" + base64.RawURLEncoding.EncodeToString([]byte("a/b"))},
		{"..", "~Li4"},
		{".", "~Lg"},
		{"-a", "~LWE"},
		{"~a", "~fmE"},
		{"a b", "~YSBi"},
	} {
		got, err := issuerSegment(tt.issuer)
		if err != nil || got != tt.want {
			t.Errorf("issuerSegment(%q) = %q, %v; want %q", tt.issuer, got, err, tt.want)
		}
		checkSegment(t, tt.issuer)
	}
	for _, bad := range []string{"", "a\x00", "a\u200b", "\xff", strings.Repeat("a", 257)} {
		checkSegment(t, bad)
	}
}

// FuzzIssuerSegment: every issuer id either is refused or maps to one safe path segment that maps back to it.
func FuzzIssuerSegment(f *testing.F) {
	for _, s := range []string{"acme", "a/b", "..", ".", "~YQ", "a%2Fb", "日本", "a\x00", "\xff", "a\u200b", "-", "_x", strings.Repeat("é", 128)} {
		f.Add(s)
	}
	f.Fuzz(checkSegment)
}

func TestValidMountPath(t *testing.T) {
	for s, want := range map[string]bool{
		"secret": true, "kv-v2": true, "team/warren": true, "a.b/c_d": true,
		"": false, "/secret": false, "secret/": false, "a//b": false, "..": false, "a/../b": false, "a b": false,
		"a?b": false, "a%2f": false, "~x": false,
	} {
		if got := validMountPath(s); got != want {
			t.Errorf("validMountPath(%q) = %v, want %v", s, got, want)
		}
	}
}
