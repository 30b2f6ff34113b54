package vault

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/warren-mesh/warren/internal/secrets"
)

// The layout below <mount>/data/<prefix>/ (KV v2):
//
//	issuers/<segment>  {"secret": "<standard base64 of the HMAC key>"}  one KV version per key version
//	admin              {"key": "wak_..."}                                the billing API's admin keys
//	model              {"api_key": "..."}                                the model API key
const (
	issuersDir = "issuers"
	adminName  = "admin"
	modelName  = "model"
)

// issuerSegment is the one path segment that names issuer below issuers/. Issuer ids may hold any printable
// UTF-8, "/", ".." and "%" included, so only plain ids (an ASCII letter or digit, then letters, digits, '.',
// '_' or '-') are used as they are; any other valid id is "~" followed by its unpadded base64url, which holds
// no '/', is never "." or "..", and cannot equal a plain id (those never start with '~'). The mapping is
// one-to-one, so two issuers never share a secret. Invalid ids are refused before any path is built.
func issuerSegment(issuer string) (string, error) {
	if !secrets.ValidIssuer(issuer) {
		return "", fmt.Errorf("issuer %q: %w", issuer, ErrInvalidIssuer)
	}
	if plainSegment(issuer) {
		return issuer, nil
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(issuer)), nil
}

func plainSegment(s string) bool {
	if s == "" || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validMountPath reports whether s (a mount or prefix from the configuration) is one or more plain segments
// separated by single slashes: no empty, "." or ".." segment, nothing a URL would reinterpret.
func validMountPath(s string) bool {
	if s == "" || len(s) > 512 {
		return false
	}
	for seg := range strings.SplitSeq(s, "/") {
		if !plainSegment(seg) {
			return false
		}
	}
	return true
}
