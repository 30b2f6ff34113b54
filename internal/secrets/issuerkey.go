package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Form says how an issuer secret was handed out and so which bytes sign its tokens (docs/PROTOCOL.md#tokens).
type Form uint8

const (
	// FormBase64 is a legacy key: random bytes handed out, and stored, as standard base64. Tokens are signed
	// with the decoded bytes. Keys written before text secrets existed keep this form until rotated.
	FormBase64 Form = iota
	// FormText is a text secret: TextSecretPrefix and base62 characters, handed out and stored as is. Tokens
	// are signed with its UTF-8 bytes, which is what JWT libraries do with a string secret.
	FormText
)

func (f Form) String() string {
	if f == FormText {
		return "text"
	}
	return "base64"
}

// Text secrets. A stored secret that starts with TextSecretPrefix is a text secret and nothing else: "_" is
// not in the standard base64 alphabet, so no legacy key can start with it, and a string with the prefix is
// never base64-decoded (one that fails the text rules is corrupt, not a legacy key).
const (
	// TextSecretPrefix marks issuer secrets ("warren signing key"), so one pasted in the wrong place or
	// leaked is recognisable (admin keys are "wak_").
	TextSecretPrefix = "wsk_"
	// TextSecretChars is the number of random base62 characters of a generated text secret: 43 × log2(62) ≈
	// 256 bits, the HS256 key-size guidance. It is also the least a stored text secret may have.
	TextSecretChars = 43
	// MaxTextSecretChars bounds the characters after the prefix of a stored text secret.
	MaxTextSecretChars = 256
)

const base62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// ErrBadSecret means a stored issuer secret is neither a valid text secret nor valid standard base64 of
// enough bytes. Its message never contains the secret.
var ErrBadSecret = errors.New("malformed issuer secret")

// NewTextSecret returns a fresh random text secret: TextSecretPrefix and TextSecretChars base62 characters
// drawn uniformly (rejection sampling) from crypto/rand.
func NewTextSecret() (string, error) {
	out := make([]byte, 0, len(TextSecretPrefix)+TextSecretChars)
	out = append(out, TextSecretPrefix...)
	buf := make([]byte, 64)
	for len(out) < cap(out) {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("generate issuer secret: %w", err)
		}
		for _, b := range buf {
			if b >= 248 { // 248 = 4 × 62: keep the draw uniform
				continue
			}
			out = append(out, base62[b%62])
			if len(out) == cap(out) {
				break
			}
		}
	}
	return string(out), nil
}

// NewTextKey returns a Key with id and a fresh text secret.
func NewTextKey(id string) (Key, error) {
	s, err := NewTextSecret()
	if err != nil {
		return Key{}, err
	}
	return Key{ID: id, Secret: []byte(s), Form: FormText}, nil
}

// ValidTextSecret reports whether s is a well-formed text secret: TextSecretPrefix, then TextSecretChars to
// MaxTextSecretChars characters of [A-Za-z0-9].
func ValidTextSecret(s string) bool {
	body, ok := strings.CutPrefix(s, TextSecretPrefix)
	if !ok || len(body) < TextSecretChars || len(body) > MaxTextSecretChars {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// KeyFromStored builds the Key a store holds as the string stored. A string with TextSecretPrefix must be a
// valid text secret (ValidTextSecret) and signs with its own bytes; any other string must be strict standard
// base64 of at least minLegacy bytes (at least 1) and signs with the decoded bytes. Anything else is
// ErrBadSecret, whose message says what is wrong but never holds the secret.
func KeyFromStored(id, stored string, minLegacy int) (Key, error) {
	if strings.HasPrefix(stored, TextSecretPrefix) {
		if !ValidTextSecret(stored) {
			return Key{}, fmt.Errorf("%w: a %q secret must have %d to %d characters of A-Z, a-z and 0-9 after the prefix",
				ErrBadSecret, TextSecretPrefix, TextSecretChars, MaxTextSecretChars)
		}
		return Key{ID: id, Secret: []byte(stored), Form: FormText}, nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(stored)
	if err != nil {
		return Key{}, fmt.Errorf("%w: neither a %q text secret nor standard base64", ErrBadSecret, TextSecretPrefix)
	}
	if len(b) < max(minLegacy, 1) {
		return Key{}, fmt.Errorf("%w: base64 secret is %d bytes, want at least %d", ErrBadSecret, len(b), max(minLegacy, 1))
	}
	return Key{ID: id, Secret: b, Form: FormBase64}, nil
}

// Given is the secret as it is handed to the customer (the admin API, `warren admin keys rotate`) and kept in
// the store: the text of a text secret, which the customer's JWT library signs with as is; standard base64
// of a legacy key's bytes, which the customer had to decode. KeyFromStored(k.ID, k.Given(), n) gives k back.
func (k Key) Given() string {
	if k.Form == FormText {
		return string(k.Secret)
	}
	return base64.StdEncoding.EncodeToString(k.Secret)
}

// String keeps a Key's secret out of logs and error messages formatted with %v.
func (k Key) String() string { return fmt.Sprintf("{%s %s secret}", k.ID, k.Form) }

// GoString is String for %#v.
func (k Key) GoString() string { return k.String() }

// LogValue keeps the secret out of structured logs (slog's JSON and text handlers alike).
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// MarshalJSON keeps the secret out of any JSON a Key ends up in: only its id and form are written.
func (k Key) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID   string `json:"id"`
		Form string `json:"form"`
	}{k.ID, fmt.Sprint(k.Form)})
}
