// Package previews holds preview URLs (docs/ARCHITECTURE.md#previews): a port of a user's sandbox made
// reachable from the internet through the edge at a URL carrying a signed token. The token names the
// preview (its id and port) and signs it with a key every edge shares; the preview itself (owner, expiry,
// whether it is public, the account its traffic runs under) is a row of the shared database, so an edge of
// any region verifies it and a revocation (the row's deletion) holds at every edge at once.
//
// A token is "<port>-<id>-<sig>": the port in decimal, 16 characters of id and 32 of signature in
// lowercase base32, 55 characters at most, so it is one DNS label of a wildcard domain.
package previews

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Preview is one preview URL.
type Preview struct {
	ID      string
	Issuer  string
	User    string
	Port    int
	Public  bool
	Created time.Time
	Expires time.Time
	// Grant is the encoded wire.Grant the edge admitted when the preview was made: the account and limits
	// its traffic runs the sandbox under.
	Grant string
}

// Store keeps previews and the signing key in the database every edge of every region shares. Safe for
// concurrent use.
type Store interface {
	// Key returns the signing key, made (32 random bytes) by the first caller of any edge.
	Key(ctx context.Context) ([]byte, error)
	// Create stores p unless its user already has max unexpired previews (ErrLimit); expired previews are
	// forgotten meanwhile.
	Create(ctx context.Context, p Preview, max int) error
	// Get returns the preview id: ErrNotFound when it was never made, was revoked or is forgotten.
	Get(ctx context.Context, id string) (Preview, error)
	// List returns the user's unexpired previews at now, oldest first.
	List(ctx context.Context, issuer, user string, now time.Time) ([]Preview, error)
	// Revoke deletes the user's preview id: ErrNotFound when the user has none of that id.
	Revoke(ctx context.Context, issuer, user, id string) error
}

// Errors of a Store.
var (
	ErrNotFound = errors.New("no such preview")
	ErrLimit    = errors.New("too many live previews for this user")
)

// Lengths of a token's parts, in base32 characters.
const (
	idLen    = 16 // 80 random bits
	sigLen   = 32 // 160 bits of HMAC-SHA256
	KeyBytes = 32
	// MaxTokenLen is the longest token: a port of 5 digits, two dashes, id and signature.
	MaxTokenLen = 5 + 1 + idLen + 1 + sigLen
)

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a new random preview id.
func NewID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return b32.EncodeToString(b[:])
}

// NewKey returns a new random signing key.
func NewKey() []byte {
	b := make([]byte, KeyBytes)
	_, _ = rand.Read(b)
	return b
}

// mac is HMAC-SHA256 under key of the parts, each length-prefixed so no two lists of parts sign alike.
func mac(key []byte, parts ...string) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

// signed are the fields a preview's signature covers: everything but the creation time and the grant.
func signed(domain string, p Preview) []string {
	return []string{domain, p.ID, strconv.Itoa(p.Port), p.Issuer, p.User,
		strconv.FormatInt(p.Expires.Unix(), 10), strconv.FormatBool(p.Public)}
}

func sig(key []byte, p Preview) string {
	return b32.EncodeToString(mac(key, signed("warren-preview/v1", p)...)[:20])
}

// Token returns p's token under key.
func Token(key []byte, p Preview) string {
	return strconv.Itoa(p.Port) + "-" + p.ID + "-" + sig(key, p)
}

// Parsed is a token taken apart (not yet verified).
type Parsed struct {
	Port int
	ID   string
	Sig  string
}

// ParseToken takes a token apart. It checks the syntax only: Verify checks the signature against the
// stored preview.
func ParseToken(s string) (Parsed, bool) {
	if len(s) > MaxTokenLen {
		return Parsed{}, false
	}
	port, rest, ok := strings.Cut(s, "-")
	if !ok {
		return Parsed{}, false
	}
	id, sg, ok := strings.Cut(rest, "-")
	if !ok || len(id) != idLen || len(sg) != sigLen || !isB32(id) || !isB32(sg) {
		return Parsed{}, false
	}
	n, ok := ParsePort(port)
	if !ok {
		return Parsed{}, false
	}
	return Parsed{Port: n, ID: id, Sig: sg}, true
}

// ParsePort parses a port: 1 to 65535 in decimal, without sign or leading zeros.
func ParsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n >= 1 && n <= 65535
}

func isB32(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Verify reports whether t is the token of p under key: same id and port, and a signature over p's stored
// owner, expiry and visibility (compared in constant time). It does not check the expiry.
func Verify(key []byte, p Preview, t Parsed) bool {
	if t.ID != p.ID || t.Port != p.Port {
		return false
	}
	return hmac.Equal([]byte(t.Sig), []byte(sig(key, p)))
}

// ParseHost returns the token of a host name "<token>.<domain>" (any case, with or without a port), or
// false when host is not one label under domain.
func ParseHost(host, domain string) (string, bool) {
	if domain == "" || len(host) > 255 {
		return "", false
	}
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, ok := strings.CutSuffix(host, "."+strings.ToLower(domain))
	if !ok || label == "" || strings.Contains(label, ".") {
		return "", false
	}
	if _, ok := ParseToken(label); !ok {
		return "", false
	}
	return label, true
}

// Cookie is the name of the cookie that carries a private preview's access once the owner's token opened
// it: scoped to the preview's host, or to its path under the edge's host.
const Cookie = "warren_preview"

// CookieValue is the value of p's access cookie for its owner until exp: "<exp unix>.<mac>". It holds no
// token of the user's, only a MAC over the preview and exp that the edge checks with CheckCookie.
func CookieValue(key []byte, p Preview, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + b32.EncodeToString(mac(key, append(signed("warren-preview-cookie/v1", p), e)...)[:20])
}

// CheckCookie reports whether v is an access cookie of p under key that has not expired at now.
func CheckCookie(key []byte, p Preview, v string, now time.Time) bool {
	e, m, ok := strings.Cut(v, ".")
	if !ok || len(e) > 20 || len(m) != sigLen {
		return false
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil || !now.Before(time.Unix(exp, 0)) {
		return false
	}
	want := CookieValue(key, p, time.Unix(exp, 0))
	return hmac.Equal([]byte(v), []byte(want))
}

// Headers between the edge and the runner's preview relay: the edge passes what it keeps of the client's
// request in them; the runner turns them back into Cookie and X-Forwarded-* for the sandbox's server and
// removes every other X-Warren-* header.
const (
	CookieHeader = "X-Warren-Preview-Cookie" // the client's cookies, the edge's access cookie removed
	HostHeader   = "X-Warren-Preview-Host"   // the public host the client asked (X-Forwarded-Host)
	ProtoHeader  = "X-Warren-Preview-Proto"  // http or https (X-Forwarded-Proto)
	PrefixHeader = "X-Warren-Preview-Prefix" // a path-based URL's prefix (X-Forwarded-Prefix)
)

// forwarding are the headers (lower case) through which proxies and CDNs in front of a server tell it
// about the client (its address, the scheme, host, port and path it asked for): a server or framework
// behind one trusts them for links, redirects, access rules and rate limits. Only the edge may say these
// things to a preview's server, so a visitor's are never relayed.
var forwarding = map[string]bool{
	"forwarded": true, "via": true, "x-real-ip": true, "true-client-ip": true, "x-client-ip": true,
	"client-ip": true, "x-cluster-client-ip": true, "x-original-forwarded-for": true, "x-originating-ip": true,
	"x-remote-ip": true, "x-remote-addr": true, "x-proxyuser-ip": true, "x-host": true, "x-original-host": true,
	"x-original-url": true, "x-rewrite-url": true, "x-scheme": true, "x-url-scheme": true,
	"front-end-https": true, "x-envoy-external-address": true, "akamai-origin-hop": true,
}

// forwardingPrefixes are families of them: X-Forwarded-* (For, Host, Proto, Port, Prefix, Server, Ssl…),
// Cloudflare's CF-* (CF-Connecting-IP, CF-Visitor's scheme…) and Fastly's Fastly-* (Fastly-Client-IP…).
var forwardingPrefixes = []string{"x-forwarded-", "cf-", "fastly-"}

// ForwardingHeader reports whether a header of this name tells a server about its client as a proxy in
// front of it would (X-Forwarded-*, Forwarded, X-Real-IP, True-Client-IP, CF-Connecting-IP, Via…): the
// edge removes a preview visitor's, and the runner removes any left and sets the edge's own.
func ForwardingHeader(name string) bool {
	l := strings.ToLower(name)
	if forwarding[l] {
		return true
	}
	for _, p := range forwardingPrefixes {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}
