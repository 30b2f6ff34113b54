package billing_test

import (
	"strings"
	"testing"

	"github.com/warren-mesh/warren/billing"
)

func TestAPIKeySecretRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id, secret, err := billing.NewAPIKeySecret()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := billing.ParseAPIKeySecret(secret)
		if !ok || got != id || seen[id] {
			t.Fatalf("ParseAPIKeySecret(%q) = %q, %v; want %q once", secret, got, ok, id)
		}
		seen[id] = true
	}
	for _, s := range []string{"", "wak_", "Bearer wak_x", "wsk_ak0123456789abcdef_" + strings.Repeat("A", 43),
		"wak_ak0123456789ABCDEF_" + strings.Repeat("A", 43), "wak_ak0123456789abcdef-" + strings.Repeat("A", 43),
		"wak_ak0123456789abcdef_" + strings.Repeat("A", 42) + "=", "wak_ak0123456789abcdef_" + strings.Repeat("A", 44)} {
		if id, ok := billing.ParseAPIKeySecret(s); ok {
			t.Errorf("ParseAPIKeySecret(%q) = %q, want refused", s, id)
		}
	}
}

// FuzzParseAPIKeySecret: any bearer string (hostile) is either refused or yields a valid key id that the
// secret embeds, so the id sent to the store is always well formed.
func FuzzParseAPIKeySecret(f *testing.F) {
	_, secret, _ := billing.NewAPIKeySecret()
	for _, s := range []string{secret, "", "wak_", "wak_ak0123456789abcdef_" + strings.Repeat("_", 43)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := billing.ParseAPIKeySecret(s)
		if !ok {
			if id != "" {
				t.Fatalf("refused %q but answered id %q", s, id)
			}
			return
		}
		if !billing.ValidAPIKeyID(id) || !strings.HasPrefix(s, "wak_"+id+"_") {
			t.Fatalf("ParseAPIKeySecret(%q) = %q", s, id)
		}
	})
}
