package token

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/golang-jwt/jwt/v5"

	"github.com/warren-mesh/warren/internal/secrets"
)

// Mint signs c with key (HS256, header kid = key.ID unless the ID is empty). It refuses claims Verify would
// reject for their shape (ErrBadClaims) and tokens over the protocol's 8 KiB (ErrOversize); it does not
// judge times, so tests can mint expired tokens. Errors never contain the secret.
func Mint(key secrets.Key, c Claims) (string, error) {
	if len(key.Secret) == 0 {
		return "", errors.New("mint token: empty secret")
	}
	if key.ID != "" && !validName(key.ID) {
		return "", errors.New("mint token: key id must be 1 to 256 bytes without control characters")
	}
	body, err := c.marshal()
	if err != nil {
		return "", fmt.Errorf("mint token: %w: %w", ErrBadClaims, err)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, rawClaims(body))
	if key.ID != "" {
		t.Header["kid"] = key.ID
	}
	s, err := t.SignedString(key.Secret)
	if err != nil {
		return "", fmt.Errorf("mint token: sign: %w", err)
	}
	if len(s) > DefaultMaxSize {
		return "", fmt.Errorf("mint token: %d bytes: %w", len(s), ErrOversize)
	}
	return s, nil
}

// rawClaims hands an already encoded payload to the jwt package, which only marshals it.
type rawClaims json.RawMessage

func (r rawClaims) MarshalJSON() ([]byte, error) { return r, nil }

func (rawClaims) GetExpirationTime() (*jwt.NumericDate, error) { return nil, nil }
func (rawClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return nil, nil }
func (rawClaims) GetNotBefore() (*jwt.NumericDate, error)      { return nil, nil }
func (rawClaims) GetIssuer() (string, error)                   { return "", nil }
func (rawClaims) GetSubject() (string, error)                  { return "", nil }
func (rawClaims) GetAudience() (jwt.ClaimStrings, error)       { return nil, nil }
