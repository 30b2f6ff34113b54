package httpx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// HeaderRequestID carries a request's id, both ways.
const HeaderRequestID = "X-Request-Id"

// MaxRequestIDLen is the longest request id a client may choose (docs/PROTOCOL.md#request-id).
const MaxRequestIDLen = 64

// ValidRequestID reports whether id is a request id a client may choose: 1 to MaxRequestIDLen bytes of
// [A-Za-z0-9._:-] (a UUID, a W3C trace id and our own ids fit; nothing that could break a log line does).
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// NewRequestID is a random request id: 16 hex digits.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type requestIDKey struct{}

// RequestIDs gives every request an id: the client's X-Request-Id when ValidRequestID, else NewRequestID.
// It echoes the id on the answer and puts it in the request's context (RequestID). The id is for logs and
// correlation only: the client chooses it, so nothing the server keys on may be derived from it.
func RequestIDs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !ValidRequestID(id) {
			id = NewRequestID()
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r.WithContext(WithRequestID(r.Context(), id)))
	})
}

// WithRequestID returns ctx carrying id as its request id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id ctx carries ("" for none).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
