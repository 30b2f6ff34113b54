package secrets_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/secrets"
)

func TestNewTextSecret(t *testing.T) {
	seen := map[string]bool{}
	counts := map[rune]int{}
	for range 200 {
		s, err := secrets.NewTextSecret()
		if err != nil {
			t.Fatal(err)
		}
		if !secrets.ValidTextSecret(s) || len(s) != len(secrets.TextSecretPrefix)+secrets.TextSecretChars {
			t.Fatalf("generated secret of %d bytes is not a valid text secret", len(s))
		}
		if seen[s] {
			t.Fatal("the same secret twice")
		}
		seen[s] = true
		for _, r := range strings.TrimPrefix(s, secrets.TextSecretPrefix) {
			counts[r]++
		}
	}
	if len(counts) != 62 { // 8600 draws: every base62 character shows up
		t.Fatalf("%d distinct characters in 8600 draws, want all 62", len(counts))
	}
	k, err := secrets.NewTextKey("acme-v1")
	if err != nil || k.ID != "acme-v1" || k.Form != secrets.FormText || k.Given() != string(k.Secret) {
		t.Fatalf("NewTextKey = %v, %v", k, err)
	}
}

// The stored string alone says the form: the prefix means text (checked, never base64-decoded), anything
// else strict standard base64.
func TestKeyFromStored(t *testing.T) {
	text, _ := secrets.NewTextSecret()
	k, err := secrets.KeyFromStored("a-v2", text, 32)
	if err != nil || k.Form != secrets.FormText || string(k.Secret) != text || k.ID != "a-v2" || k.Given() != text {
		t.Fatalf("text secret: %v, %v", k, err)
	}
	raw := bytes.Repeat([]byte{0xfb}, 32) // base64 "+/+/...": the whole standard alphabet's tail
	b64 := base64.StdEncoding.EncodeToString(raw)
	k, err = secrets.KeyFromStored("a-v1", b64, 32)
	if err != nil || k.Form != secrets.FormBase64 || !bytes.Equal(k.Secret, raw) || k.Given() != b64 {
		t.Fatalf("legacy key: %v, %v", k, err)
	}
	// A text-looking string without the prefix that happens to be base64 is a legacy key: the prefix decides.
	alnum := strings.Repeat("AbCd", 11) // 44 chars, valid base64 of 33 bytes
	if k, err := secrets.KeyFromStored("a", alnum, 1); err != nil || k.Form != secrets.FormBase64 || len(k.Secret) != 33 {
		t.Fatalf("unprefixed base64: %v, %v", k, err)
	}

	bad := map[string]string{
		"empty":                  "",
		"prefix only":            "wsk_",
		"text too short":         "wsk_" + strings.Repeat("a", secrets.TextSecretChars-1),
		"text too long":          "wsk_" + strings.Repeat("a", secrets.MaxTextSecretChars+1),
		"text with -":            "wsk_" + strings.Repeat("a", 43) + "-",
		"text with base64 chars": "wsk_" + b64, // '+', '/', '=': a text secret is never decoded
		"text with space":        "wsk_" + strings.Repeat("a", 43) + " ",
		"text with non-ascii":    "wsk_" + strings.Repeat("a", 43) + "é",
		"not base64":             "hello world!",
		"unpadded base64":        strings.TrimRight(base64.StdEncoding.EncodeToString([]byte("abcd")), "="),
		"url base64":             base64.URLEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe}),
		"legacy too short":       base64.StdEncoding.EncodeToString(raw[:31]),
	}
	for name, s := range bad {
		_, err := secrets.KeyFromStored("a", s, 32)
		if !errors.Is(err, secrets.ErrBadSecret) {
			t.Errorf("%s: %v, want ErrBadSecret", name, err)
		} else if len(s) > 8 && strings.Contains(err.Error(), s) {
			t.Errorf("%s: the error holds the secret", name)
		}
	}
	if !secrets.ValidTextSecret(text) || secrets.ValidTextSecret(b64) {
		t.Fatal("ValidTextSecret")
	}
}

// A Key never prints its secret.
func TestKeyFormatting(t *testing.T) {
	k, _ := secrets.NewTextKey("acme-v1")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(verb, k); strings.Contains(out, string(k.Secret)) || !strings.Contains(out, "acme-v1") {
			t.Errorf("%s of a key = %q", verb, out)
		}
		if out := fmt.Sprintf(verb, []secrets.Key{k}); strings.Contains(out, string(k.Secret)) {
			t.Errorf("%s of []Key = %q", verb, out)
		}
	}
	// Nor in structured logs or JSON.
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("key", "key", k, "holder", struct{ K secrets.Key }{k})
	slog.New(slog.NewTextHandler(&buf, nil)).Info("key", "key", k)
	b, _ := json.Marshal(map[string]any{"k": k})
	if out := buf.String() + string(b); strings.Contains(out, string(k.Secret)) || !strings.Contains(out, "acme-v1") {
		t.Errorf("logs and JSON of a key: %s", out)
	}
}
