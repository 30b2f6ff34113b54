package token

import (
	"bytes"
	"context"
	"crypto/sha256"
	"slices"
	"time"

	"github.com/warren-mesh/warren/internal/gencache"
	"github.com/warren-mesh/warren/internal/secrets"
)

// Verified-token cache defaults (VerifierOptions.CacheTTL, CacheSize).
const (
	DefaultCacheTTL  = time.Minute
	DefaultCacheSize = 20_000
)

// cacheBytesPerToken is the average size of a kept token the cache's byte bound allows: the tokens kept hold
// at most CacheSize times this many bytes (20 MiB by default), counted by their raw length (their decoded
// claims are smaller, plus an entry's few hundred bytes), so tokens near the 8 KiB maximum (an issuer's large sdkConfig, or an issuer minting large
// tokens to fill the cache) hold memory in proportion, not 20,000 of them.
const cacheBytesPerToken = 1 << 10

// verified is a token whose signature and claims passed, remembered by the SHA-256 of its raw form: the
// claims, and the issuer key that signed it. A later Verify of the same token skips the HS256 check and
// the claims decoding only while that key is still the issuer's current or previous one in the store (the
// same lookup a full verification makes), so a revoked or rotated-out key refuses its tokens exactly as
// soon as it would without the cache. The times are checked on every use.
type verified struct {
	claims *Claims
	keyID  string
	secret []byte
	until  time.Time // the entry is not used from then on (it is also dropped within two TTLs)
}

// verifiedCache is the verified tokens, a gencache (two generations swapped every TTL, as the edge's
// admission cache): an entry lives at most two TTLs, every operation is O(1), and once a generation holds
// size/2 tokens, or size/2 KiB of them, the others are verified every time. Safe for concurrent use.
type verifiedCache struct {
	ttl time.Duration
	gen *gencache.Cache[[sha256.Size]byte, verified]
}

func newVerifiedCache(ttl time.Duration, size int) *verifiedCache {
	return &verifiedCache{ttl: ttl, gen: &gencache.Cache[[sha256.Size]byte, verified]{
		TTL: ttl, MaxEntries: size, MaxBytes: size * cacheBytesPerToken}}
}

func (c *verifiedCache) get(k [sha256.Size]byte, now time.Time) (verified, bool) {
	v, ok := c.gen.Get(k, now)
	if !ok || !now.Before(v.until) {
		return verified{}, false
	}
	return v, true
}

// put keeps v, the entry of a token of n bytes, unless its generation is full (by count or by bytes).
func (c *verifiedCache) put(k [sha256.Size]byte, v verified, n int, now time.Time) {
	c.gen.Put(k, v, n, now)
}

// cached answers raw from the cache when it was verified before, its signing key is still one the store
// gives for its issuer, and its times are still valid now; ok false otherwise (the caller verifies it in
// full, which also gives the precise error).
func (v *Verifier) cached(ctx context.Context, k [sha256.Size]byte) (*Claims, bool) {
	now := v.now()
	e, ok := v.cache.get(k, now)
	if !ok || v.checkTimes(e.claims, now) != nil {
		return nil, false
	}
	keys, err := v.store.IssuerKeys(ctx, e.claims.Issuer)
	if err != nil {
		return nil, false
	}
	if !slices.ContainsFunc(keys[:min(2, len(keys))], func(key secrets.Key) bool {
		return key.ID == e.keyID && bytes.Equal(key.Secret, e.secret)
	}) {
		return nil, false
	}
	return cloneClaims(e.claims), true // the caller may change its copy
}

// cloneClaims is a copy of c that shares no memory with it: its slices too, so that a caller changing the
// claims it was answered in place changes no other answer for the same token.
func cloneClaims(c *Claims) *Claims {
	k := *c
	k.Audience = slices.Clone(c.Audience)
	k.Permissions.Tools = slices.Clone(c.Permissions.Tools)
	k.Permissions.BlockedTools = slices.Clone(c.Permissions.BlockedTools)
	k.SDKConfig = slices.Clone(c.SDKConfig)
	return &k
}

// remember keeps c, signed by key, for the token of n bytes whose hash is k: until its expiry (with the
// leeway) or the cache's TTL, whichever comes first.
func (v *Verifier) remember(k [sha256.Size]byte, n int, c *Claims, key secrets.Key) {
	now := v.now()
	until := now.Add(v.cache.ttl)
	if exp := c.ExpiresAt.Add(v.leeway); exp.Before(until) {
		until = exp
	}
	if !now.Before(until) {
		return
	}
	v.cache.put(k, verified{claims: cloneClaims(c), keyID: key.ID, secret: key.Secret, until: until}, n, now)
}
