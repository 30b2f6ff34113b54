package httpx

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Bearer returns the credentials of an Authorization header under Warren's one rule
// (docs/PROTOCOL.md#auth-header): the scheme "Bearer" in any case (RFC 7235 §2.1: schemes are
// case-insensitive), one or more spaces or tabs, then the token; whitespace around the token is ignored.
// ok is false for an empty header, another scheme, a missing or empty token, and a token holding a space,
// a tab or a control character (no key or token Warren issues has one, and RFC 6750's token68 allows none).
func Bearer(header string) (token string, ok bool) {
	const scheme = "bearer"
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", false
	}
	rest := header[len(scheme):]
	if rest[0] != ' ' && rest[0] != '\t' {
		return "", false // "Bearerx": another scheme
	}
	token = strings.Trim(rest, " \t")
	if token == "" {
		return "", false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c == 0x7f {
			return "", false
		}
	}
	return token, true
}

// BearerOf is Bearer of r's Authorization header.
func BearerOf(r *http.Request) (token string, ok bool) { return Bearer(r.Header.Get("Authorization")) }

// KeyEqual reports whether got is want. Both are hashed with SHA-256 before a constant-time compare, so
// the time taken reveals neither want's bytes nor its length. An empty want (no key configured) matches
// nothing.
func KeyEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:])&nonEmpty(want) == 1
}

// KeyIn reports whether got is one of keys, comparing with every key as KeyEqual does (empty keys match
// nothing), so the time taken does not say which key matched either.
func KeyIn(got string, keys []string) bool {
	g := sha256.Sum256([]byte(got))
	match := 0
	for _, k := range keys {
		w := sha256.Sum256([]byte(k))
		match |= subtle.ConstantTimeCompare(g[:], w[:]) & nonEmpty(k)
	}
	return match == 1
}

func nonEmpty(s string) int {
	if s == "" {
		return 0
	}
	return 1
}
