package token

import (
	"errors"
	"fmt"

	"github.com/warren-mesh/warren/internal/wire"
)

// Every error Verify returns is a *wire.Error whose cause wraps exactly one of these sentinels, so both
// errors.Is(err, token.ErrExpired) and errors.As(err, new(*wire.Error)) work, and Reason maps it to a label.
var (
	ErrOversize      = errors.New("token too large")
	ErrMalformed     = errors.New("malformed token")
	ErrBadAlg        = errors.New("token algorithm is not HS256")
	ErrUnknownIssuer = errors.New("unknown token issuer")
	ErrUnknownKid    = errors.New("unknown token key id")
	ErrBadSignature  = errors.New("invalid token signature")
	ErrExpired       = errors.New("token expired")
	ErrNotYetValid   = errors.New("token not yet valid")
	ErrBadAudience   = errors.New("token audience mismatch")
	ErrBadClaims     = errors.New("invalid token claims")
	ErrUnavailable   = errors.New("token keys unavailable")
)

// ReasonOther is what Reason answers for an error that did not come from Verify.
const ReasonOther = "other"

// reasons is the fixed table of failures: sentinel, metric label, wire code and client-facing message. Every
// failure but an unreachable secret store is unauthenticated: a client cannot repair a token, it must get a
// new one, and 401 tells SDKs exactly that. Claims that are well signed but invalid are the issuer's bug and
// are still unauthenticated (label bad_claims tells operators apart).
var reasons = []struct {
	err   error
	label string
	code  wire.Code
	msg   string
}{
	{ErrOversize, "oversize", wire.Unauthenticated, "token too large"},
	{ErrMalformed, "malformed", wire.Unauthenticated, "malformed token"},
	{ErrBadAlg, "bad_alg", wire.Unauthenticated, "token algorithm must be HS256"},
	{ErrUnknownIssuer, "unknown_issuer", wire.Unauthenticated, "unknown token issuer"},
	{ErrUnknownKid, "unknown_kid", wire.Unauthenticated, "unknown token key id"},
	{ErrBadSignature, "bad_signature", wire.Unauthenticated, "invalid token signature"},
	{ErrExpired, "expired", wire.Unauthenticated, "token expired"},
	{ErrNotYetValid, "not_yet_valid", wire.Unauthenticated, "token not yet valid"},
	{ErrBadAudience, "bad_audience", wire.Unauthenticated, "token audience mismatch"},
	{ErrBadClaims, "bad_claims", wire.Unauthenticated, "invalid token claims"},
	{ErrUnavailable, "unavailable", wire.Unavailable, "token keys unavailable, retry later"},
}

// Reason is the metric label for a Verify error: one of Reasons(), "" for nil, ReasonOther for any error not
// returned by Verify. It never contains anything taken from the token.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return ReasonOther
}

// Reasons lists every label Reason can give a Verify error, e.g. to initialise a Prometheus counter vector.
func Reasons() []string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = r.label
	}
	return out
}

// reject builds the *wire.Error for sentinel. detail (safe, fixed text naming a claim, never a value) is
// appended to the message; cause is kept for logs only. The label travels in details.reason so SDKs can tell
// "expired" (refresh the token) from the rest.
func reject(sentinel error, cause error, detail string) error {
	for _, r := range reasons {
		if r.err != sentinel {
			continue
		}
		msg := r.msg
		if detail != "" {
			msg += ": " + detail
		}
		c := sentinel
		if cause != nil {
			c = fmt.Errorf("%w: %w", sentinel, cause)
		}
		return wire.Wrap(r.code, c, msg).WithDetails(map[string]any{"reason": r.label})
	}
	panic("token: reject with an unlisted sentinel") // programming error, caught by the tests
}
