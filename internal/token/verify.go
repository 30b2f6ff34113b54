package token

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/strictjson"
)

// Verifier defaults (docs/PROTOCOL.md#tokens).
const (
	DefaultLeeway  = 60 * time.Second
	DefaultMaxSize = 8 << 10
)

const algHS256 = "HS256"

// VerifierOptions tunes a Verifier; zero fields take the defaults.
type VerifierOptions struct {
	// Audience, when set, must appear in the token's aud; a token without aud is then rejected.
	Audience string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Leeway is the clock skew allowed on exp, nbf and iat: DefaultLeeway when zero, none when negative.
	Leeway time.Duration
	// MaxSize is the largest token accepted, in bytes: DefaultMaxSize when zero or negative.
	MaxSize int
	// CacheTTL is how long a verified token's claims are reused for the same token (never past its expiry):
	// DefaultCacheTTL when zero; negative turns the cache off. A reuse still looks the issuer's keys up
	// in the store and requires the key that signed the token to be among them, so a revoked key refuses
	// its tokens as soon as without the cache.
	CacheTTL time.Duration
	// CacheSize bounds the verified tokens kept: DefaultCacheSize when zero or negative. Their raw bytes
	// are bounded too, at CacheSize KiB (a kilobyte a token on average).
	CacheSize int
}

// Verifier checks end-user tokens against issuer keys from a secrets.Store. Safe for concurrent use.
type Verifier struct {
	store   secrets.Store
	aud     string
	now     func() time.Time
	leeway  time.Duration
	maxSize int
	parser  *jwt.Parser
	cache   *verifiedCache // nil: off
}

// NewVerifier returns a Verifier reading keys from store, normally a *secrets.Cache. When store is a
// secrets.Refresher, a token naming an unknown kid or matching no cached key makes the Verifier ask it once to
// refresh, so rotated keys work before the cache's TTL runs out.
func NewVerifier(store secrets.Store, opts VerifierOptions) *Verifier {
	v := &Verifier{store: store, aud: opts.Audience, now: opts.Now, leeway: opts.Leeway, maxSize: opts.MaxSize}
	if v.now == nil {
		v.now = time.Now
	}
	switch {
	case v.leeway == 0:
		v.leeway = DefaultLeeway
	case v.leeway < 0:
		v.leeway = 0
	}
	if v.maxSize <= 0 {
		v.maxSize = DefaultMaxSize
	}
	if opts.CacheTTL >= 0 {
		ttl, size := opts.CacheTTL, opts.CacheSize
		if ttl == 0 {
			ttl = DefaultCacheTTL
		}
		if size <= 0 {
			size = DefaultCacheSize
		}
		v.cache = newVerifiedCache(ttl, size)
	}
	// Claims are validated by Verify itself (one clock, one leeway, one set of reasons); the parser checks
	// structure, the algorithm and the signature. Strict base64 keeps a signature to one encoding.
	v.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{algHS256}),
		jwt.WithoutClaimsValidation(),
		jwt.WithStrictDecoding(),
	)
	return v
}

// Verify checks raw and returns its claims. Every error is a *wire.Error: unauthenticated for a bad token,
// unavailable when the issuer's keys cannot be fetched; Reason(err) names the failure. Neither the token nor
// any secret appears in an error.
//
// Order: size; structure and header (alg exactly HS256, kid a string, no crit); iss read from the unverified
// payload only to choose keys; keys (kid selects among the current and previous versions, no kid tries
// both); signature; then the signed claims: shape, iss equal to the one used to choose the key, exp, nbf and
// iat with the leeway, audience. A token verified before is answered from a cache (VerifierOptions.CacheTTL)
// while the key that signed it is still the issuer's current or previous one and its times are valid.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Claims, error) {
	if len(raw) > v.maxSize {
		return nil, reject(ErrOversize, nil, "")
	}
	var hash [sha256.Size]byte
	if v.cache != nil {
		hash = sha256.Sum256([]byte(raw))
		if c, ok := v.cached(ctx, hash); ok {
			return c, nil
		}
	}
	unverified := jwt.MapClaims{}
	tok, parts, err := v.parser.ParseUnverified(raw, unverified)
	if err != nil {
		if tok != nil && tok.Header != nil && tok.Header["alg"] != algHS256 {
			return nil, reject(ErrBadAlg, nil, "")
		}
		return nil, reject(ErrMalformed, err, "")
	}
	if alg, _ := tok.Header["alg"].(string); alg != algHS256 {
		return nil, reject(ErrBadAlg, nil, "")
	}
	if hdr, err := v.parser.DecodeSegment(parts[0]); err != nil || !strictjson.Valid(hdr) {
		// The header map kept the last of two members of one name; refuse rather than pick one.
		return nil, reject(ErrMalformed, errors.New("header names a member twice"), "")
	}
	if _, ok := tok.Header["crit"]; ok {
		return nil, reject(ErrMalformed, errors.New("crit header not supported"), "")
	}
	kid, hasKid := "", false
	if k, ok := tok.Header["kid"]; ok {
		s, isString := k.(string)
		if !isString || !validName(s) {
			return nil, reject(ErrMalformed, errors.New("kid is not a valid string"), "")
		}
		kid, hasKid = s, true
	}
	iss, _ := unverified["iss"].(string)
	if !validName(iss) {
		return nil, reject(ErrMalformed, errors.New("no valid iss claim"), "")
	}

	keys, err := v.store.IssuerKeys(ctx, iss)
	if err != nil {
		return nil, storeError(err)
	}
	signer, err := v.checkSignature(raw, keys, kid, hasKid)
	if r, ok := v.store.(secrets.Refresher); ok && (errors.Is(err, ErrUnknownKid) || errors.Is(err, ErrBadSignature)) {
		if keys, rerr := r.Refresh(ctx, iss); rerr != nil {
			err = storeError(rerr)
		} else {
			signer, err = v.checkSignature(raw, keys, kid, hasKid)
		}
	}
	if err != nil {
		return nil, err
	}

	body, err := v.parser.DecodeSegment(parts[1]) // decoded once already by ParseUnverified
	if err != nil {
		return nil, reject(ErrMalformed, err, "")
	}
	c, err := decodeClaims(body)
	if err != nil {
		var ce *claimError
		if errors.As(err, &ce) {
			return nil, reject(ErrBadClaims, ce.cause, ce.detail)
		}
		return nil, reject(ErrBadClaims, err, "")
	}
	if c.Issuer != iss { // never, with exact names and no duplicates (strictjson); a second fence
		return nil, reject(ErrBadClaims, nil, "iss is ambiguous")
	}
	if err := v.checkTimes(c, v.now()); err != nil {
		return nil, err
	}
	if v.aud != "" && !slices.Contains(c.Audience, v.aud) {
		return nil, reject(ErrBadAudience, nil, "")
	}
	if v.cache != nil {
		v.remember(hash, len(raw), c, signer)
	}
	return c, nil
}

// checkTimes checks c's exp, nbf and iat at now, with the leeway.
func (v *Verifier) checkTimes(c *Claims, now time.Time) error {
	switch {
	case !now.Before(c.ExpiresAt.Add(v.leeway)):
		return reject(ErrExpired, nil, "")
	case !c.NotBefore.IsZero() && now.Add(v.leeway).Before(c.NotBefore):
		return reject(ErrNotYetValid, nil, "")
	case !c.IssuedAt.IsZero() && now.Add(v.leeway).Before(c.IssuedAt):
		return reject(ErrNotYetValid, errors.New("iat in the future"), "")
	}
	return nil
}

// checkSignature verifies raw against the candidate keys: the current and previous versions (the first two
// of keys), narrowed to the one named by kid when there is one, and answers the key that signed it. Older
// versions are never accepted.
func (v *Verifier) checkSignature(raw string, keys []secrets.Key, kid string, hasKid bool) (secrets.Key, error) {
	if len(keys) == 0 {
		return secrets.Key{}, reject(ErrUnknownIssuer, errors.New("store returned no keys"), "")
	}
	tried := false
	for _, k := range keys[:min(2, len(keys))] {
		if hasKid && k.ID != kid {
			continue
		}
		if len(k.Secret) == 0 { // an empty HMAC key would let anyone sign
			continue
		}
		tried = true
		_, err := v.parser.ParseWithClaims(raw, jwt.MapClaims{}, func(*jwt.Token) (any, error) { return k.Secret, nil })
		switch {
		case err == nil:
			return k, nil
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		default:
			return secrets.Key{}, reject(ErrMalformed, err, "")
		}
	}
	if !tried {
		if hasKid {
			return secrets.Key{}, reject(ErrUnknownKid, fmt.Errorf("kid %q is neither the current nor the previous key", kid), "")
		}
		return secrets.Key{}, reject(ErrBadSignature, errors.New("issuer has no usable key"), "")
	}
	return secrets.Key{}, reject(ErrBadSignature, nil, "")
}

// storeError maps a secrets.Store failure: an issuer the store does not know is a bad token; anything else
// (unreachable store, timeout, cancelled request) is unavailable, never a silent accept.
func storeError(err error) error {
	if errors.Is(err, secrets.ErrUnknownIssuer) {
		return reject(ErrUnknownIssuer, err, "")
	}
	return reject(ErrUnavailable, err, "")
}
