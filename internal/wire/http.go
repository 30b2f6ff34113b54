package wire

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/warren-mesh/warren/internal/strictjson"
)

// WriteHTTPError writes err as the JSON error body (docs/PROTOCOL.md#errors) with the matching status. Causes
// of internal errors go to log with the request id, never to the client.
func WriteHTTPError(w http.ResponseWriter, log *slog.Logger, err error) {
	pub, logIt := Public(err)
	if logIt && log != nil {
		log.Error("request failed", "err", err)
	}
	if ra, ok := pub.Details["retry_after_seconds"]; ok {
		if n, ok := ra.(int); ok {
			w.Header().Set("Retry-After", strconv.Itoa(n))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(pub.Code.HTTPStatus())
	_ = json.NewEncoder(w).Encode(pub)
}

// ReadHTTPError turns a non-2xx response body into an *Error, falling back to the status when the body is
// not ours (a proxy's HTML page, say).
func ReadHTTPError(status int, body []byte) *Error {
	var e Error
	if strictjson.Unmarshal(body, &e) == nil && e.Code.Valid() {
		return &e
	}
	msg := http.StatusText(status)
	if len(body) > 0 && len(body) < 512 {
		msg = string(body)
	}
	return &Error{Code: CodeForHTTPStatus(status), Message: msg}
}
