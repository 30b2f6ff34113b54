package token_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
)

// storedStore is a secrets.Store over the strings a store keeps (newest first), turned into keys the way the
// file and Vault stores do: secrets.KeyFromStored.
type storedStore map[string][]string

func (s storedStore) IssuerKeys(_ context.Context, iss string) ([]secrets.Key, error) {
	stored := s[iss]
	if len(stored) == 0 {
		return nil, secrets.ErrUnknownIssuer
	}
	keys := make([]secrets.Key, len(stored))
	for i, v := range stored {
		k, err := secrets.KeyFromStored(iss+"-v"+string(rune('0'+len(stored)-i)), v, 32)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// customerSign signs claims with golang-jwt as a customer's backend does: HS256 over the key bytes it is
// handed, with an optional kid.
func customerSign(t *testing.T, key []byte, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func customerClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"iss": "acme", "sub": "user-42", "exp": testNow.Add(time.Hour).Unix(),
		"budget": map[string]any{"ai": 5_000_000, "compute": 3600, "window": "day", "windowStart": token.WindowDay.Start(testNow).Format(time.RFC3339)},
	}
}

func formVerifier(store secrets.Store) *token.Verifier {
	return token.NewVerifier(store, token.VerifierOptions{Now: func() time.Time { return testNow }})
}

// A text secret signs with its UTF-8 bytes, as any JWT library does with a string secret; bytes some base64
// decoding of it gives never verify (a text secret is never decoded).
func TestVerifyTextSecret(t *testing.T) {
	text, err := secrets.NewTextSecret()
	if err != nil {
		t.Fatal(err)
	}
	v := formVerifier(storedStore{"acme": {text}})
	ctx := context.Background()

	for _, kid := range []string{"acme-v1", ""} {
		c, err := v.Verify(ctx, customerSign(t, []byte(text), kid, customerClaims()))
		if err != nil || c.Subject != "user-42" || c.Budget.AIMicros != 5_000_000 {
			t.Fatalf("kid %q: token signed over the text secret: %v, %v", kid, c, err)
		}
	}
	// Mint (warren token) with the stored key signs the same way.
	key, _ := secrets.KeyFromStored("acme-v1", text, 32)
	if _, err := v.Verify(ctx, mint(t, key, baseClaims())); err != nil {
		t.Fatalf("Mint with a text key: %v", err)
	}

	// Every base64 reading of the text (whole, or the part after the prefix) that decodes is refused.
	body := strings.TrimPrefix(text, secrets.TextSecretPrefix)
	decoded := 0
	for _, d := range []struct {
		name string
		enc  *base64.Encoding
		s    string
	}{
		{"std", base64.StdEncoding, text}, {"raw url", base64.RawURLEncoding, text},
		{"body raw std", base64.RawStdEncoding, body}, {"body raw url", base64.RawURLEncoding, body},
		{"body std", base64.StdEncoding, body + strings.Repeat("=", (4-len(body)%4)%4)},
	} {
		b, err := d.enc.DecodeString(d.s)
		if err != nil || len(b) == 0 {
			continue
		}
		decoded++
		_, err = v.Verify(ctx, customerSign(t, b, "acme-v1", customerClaims()))
		if !errors.Is(err, token.ErrBadSignature) {
			t.Errorf("token signed over the %s base64 decoding of a text secret: %v, want ErrBadSignature", d.name, err)
		}
	}
	if decoded < 2 {
		t.Fatalf("only %d base64 decodings of %d-char text succeeded: the test proves nothing", decoded, len(text))
	}
}

// A legacy key (standard base64 of random bytes) keeps signing with the decoded bytes; its base64 text used
// as the secret never verifies.
func TestVerifyLegacyBase64Key(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	b64 := base64.StdEncoding.EncodeToString(raw)
	v := formVerifier(storedStore{"acme": {b64}})
	ctx := context.Background()
	if _, err := v.Verify(ctx, customerSign(t, raw, "acme-v1", customerClaims())); err != nil {
		t.Fatalf("token signed over the decoded legacy key: %v", err)
	}
	if _, err := v.Verify(ctx, customerSign(t, raw, "", customerClaims())); err != nil {
		t.Fatalf("token signed over the decoded legacy key, no kid: %v", err)
	}
	if _, err := v.Verify(ctx, customerSign(t, []byte(b64), "acme-v1", customerClaims())); !errors.Is(err, token.ErrBadSignature) {
		t.Fatalf("token signed over the legacy key's base64 text: %v, want ErrBadSignature", err)
	}
}

// A corrupt stored secret is a clear error (the store's), not a panic and not an accepted token.
func TestVerifyCorruptStoredSecret(t *testing.T) {
	for _, bad := range []string{"wsk_short", "wsk_" + strings.Repeat("a", 43) + "=", "not base64!", ""} {
		v := formVerifier(storedStore{"acme": {bad, bad}})
		_, err := v.Verify(context.Background(), customerSign(t, []byte(bad+"x"), "acme-v1", customerClaims()))
		if !errors.Is(err, token.ErrUnavailable) || !errors.Is(err, secrets.ErrBadSecret) {
			t.Errorf("stored %q: %v, want unavailable wrapping ErrBadSecret", bad, err)
		}
	}
}

// Rotating an issuer whose current key is legacy makes a text secret current and keeps the legacy key valid
// as the previous one (with its decoded bytes), through a real file store.
func TestVerifyRotationFromLegacyToText(t *testing.T) {
	raw := []byte("fedcba9876543210fedcba9876543210")
	s := legacyStore(t, raw)
	v2, err := s.Rotate("acme")
	if err != nil {
		t.Fatal(err)
	}
	if v2.Form != secrets.FormText {
		t.Fatalf("rotated key form %v, want text", v2.Form)
	}
	v := formVerifier(secrets.NewCache(s, secrets.CacheOptions{}))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		key  []byte
		kid  string
	}{{"text v2", []byte(v2.Given()), "acme-v2"}, {"text v2 no kid", []byte(v2.Given()), ""},
		{"legacy v1", raw, "acme-v1"}, {"legacy v1 no kid", raw, ""}} {
		if _, err := v.Verify(ctx, customerSign(t, tc.key, tc.kid, customerClaims())); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// The text of v2 under v1's kid, and v1's base64 under v2's, are refused.
	if _, err := v.Verify(ctx, customerSign(t, []byte(v2.Given()), "acme-v1", customerClaims())); !errors.Is(err, token.ErrBadSignature) {
		t.Errorf("v2 text under kid v1: %v", err)
	}
	if _, err := v.Verify(ctx, customerSign(t, []byte(base64.StdEncoding.EncodeToString(raw)), "acme-v2", customerClaims())); !errors.Is(err, token.ErrBadSignature) {
		t.Errorf("v1 base64 text under kid v2: %v", err)
	}
}

// legacyStore is a file store written before text secrets: issuer acme with one key, acme-v1, the standard
// base64 of raw.
func legacyStore(t *testing.T, raw []byte) *file.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), file.DefaultFileName)
	doc := `{"version":1,"issuers":{"acme":[{"id":"acme-v1","version":1,"secret":"` + base64.StdEncoding.EncodeToString(raw) + `"}]}}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := file.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
