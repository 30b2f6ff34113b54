// Package secrets is the Secrets port (docs/ARCHITECTURE.md#ports-and-adapters): issuer HMAC keys with key
// ids (the adapters also keep the admin keys and the model API key). Adapters live in subpackages (file for
// warren dev, vault for production); Cache wraps any of them.
package secrets

import (
	"context"
	"errors"
	"unicode"
	"unicode/utf8"
)

// Key is one version of an issuer's HMAC secret. ID is the JWT "kid" that selects it. Secret is the HMAC key
// the verifier uses as is: for a text secret (Form FormText, what every new key is) the UTF-8 bytes of the
// text the customer was given, for a legacy key (FormBase64) the random bytes whose standard base64 the
// customer was given. Stores build keys with KeyFromStored, so the form comes from the stored string alone.
type Key struct {
	ID     string
	Secret []byte
	Form   Form
}

// Store yields secrets. Implementations are safe for concurrent use.
type Store interface {
	// IssuerKeys returns the issuer's keys newest first: the first is current, the second (if any) the
	// previous version still accepted during rotation. ErrUnknownIssuer when the issuer has none;
	// ErrUnavailable (wrapped) when the backing store cannot be reached.
	IssuerKeys(ctx context.Context, issuer string) ([]Key, error)
}

var (
	// ErrUnknownIssuer means the store answered and holds no key for that issuer.
	ErrUnknownIssuer = errors.New("unknown issuer")
	// ErrUnavailable means the store could not be reached.
	ErrUnavailable = errors.New("secret store unavailable")
)

// ValidIssuer is the rule for issuer ids every store applies before an id reaches a file or a path (the
// token package's rule for iss): 1 to 256 bytes of UTF-8 without control or format characters.
func ValidIssuer(s string) bool {
	if s == "" || len(s) > 256 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}
