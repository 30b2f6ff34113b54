package billing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// APIKey is an issuer's scoped key for the billing API (docs/PROTOCOL.md#issuer-api-keys): its bearer may
// do, for that issuer's users only, what the admin key may do for them (their quotas and usage). Only a
// hash of its secret is stored; the secret is shown once, when it is made.
type APIKey struct {
	ID      string    `json:"id"`
	Issuer  string    `json:"iss"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// APIKeys keeps issuers' scoped keys. Safe for concurrent use, also across processes sharing a store.
type APIKeys interface {
	// CreateAPIKey stores k with the SHA-256 of its secret (HashAPIKeySecret). ErrNotFound when k's issuer
	// is not registered; ErrConflict when k.ID is taken; ErrInvalid for a bad id, issuer or name.
	CreateAPIKey(ctx context.Context, k APIKey, hash []byte) error
	// ListAPIKeys returns the live keys of issuer, ordered by id (none: an empty list, also for an issuer
	// not registered).
	ListAPIKeys(ctx context.Context, issuer string) ([]APIKey, error)
	// RevokeAPIKey deletes issuer's key id; it authenticates nothing from then on. ErrNotFound when issuer
	// has no such key.
	RevokeAPIKey(ctx context.Context, issuer, id string) error
	// LookupAPIKey returns the key id and the hash of its secret. ErrNotFound when there is none.
	LookupAPIKey(ctx context.Context, id string) (APIKey, []byte, error)
}

// apiKeyPrefix starts every scoped key's secret, so that a leaked one is recognisable (secret scanners)
// and the billing API tells it from an admin key without a lookup.
const apiKeyPrefix = "wak_"

// apiKeyIDLen is the length of a key id: "ak" and 16 hex digits (64 random bits).
const apiKeyIDLen = 18

// apiKeySecretLen is the length of a secret: the prefix, the id, '_' and 43 base64url characters (256
// random bits).
const apiKeySecretLen = len(apiKeyPrefix) + apiKeyIDLen + 1 + 43

// NewAPIKeySecret makes a key id and its secret "wak_<id>_<256 random bits>" from crypto/rand.
func NewAPIKeySecret() (id, secret string, err error) {
	var b [8 + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("new api key: %w", err)
	}
	id = "ak" + hex.EncodeToString(b[:8])
	return id, apiKeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(b[8:]), nil
}

// ParseAPIKeySecret returns the key id of a scoped key's secret; ok is false for anything not shaped like
// one (an admin key, a token, garbage), which then costs no store lookup.
func ParseAPIKeySecret(secret string) (id string, ok bool) {
	if len(secret) != apiKeySecretLen || !strings.HasPrefix(secret, apiKeyPrefix) {
		return "", false
	}
	id, rest := secret[len(apiKeyPrefix):len(apiKeyPrefix)+apiKeyIDLen], secret[len(apiKeyPrefix)+apiKeyIDLen:]
	if !ValidAPIKeyID(id) || rest[0] != '_' {
		return "", false
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(rest[1:]); err != nil {
		return "", false
	}
	return id, true
}

// ValidAPIKeyID reports whether id is shaped like a key id NewAPIKeySecret makes.
func ValidAPIKeyID(id string) bool {
	if len(id) != apiKeyIDLen || !strings.HasPrefix(id, "ak") {
		return false
	}
	for _, c := range id[2:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// HashAPIKeySecret is what the store keeps of a secret: its SHA-256. The secret holds 256 random bits, so
// a fast hash is enough (nothing to brute-force), and the store alone cannot authenticate.
func HashAPIKeySecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Validate reports, wrapping ErrInvalid, a key with a bad id, issuer or name.
func (k APIKey) Validate() error {
	switch {
	case !ValidAPIKeyID(k.ID):
		return fmt.Errorf("api key: bad id: %w", ErrInvalid)
	case !ValidName(k.Issuer):
		return fmt.Errorf("api key: bad issuer: %w", ErrInvalid)
	case !ValidIssuerName(k.Name):
		return fmt.Errorf("api key: name must be at most %d bytes of UTF-8 without control characters: %w", MaxNameLen, ErrInvalid)
	}
	return nil
}
