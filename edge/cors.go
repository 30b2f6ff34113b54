package edge

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
)

// CORS lets browser pages of other origins call the edge's HTTP API (docs/PROTOCOL.md#cors): GET /v1/regions, GET /v1/me,
// /v1/sandbox/* and /v1/sessions[/*]. Tokens travel in the Authorization header, never in cookies, so the
// edge never allows credentials (no Access-Control-Allow-Credentials): a page must hold the user's token to
// act as the user, and the browser's ambient cookies buy it nothing. The agent channel is not covered:
// WebSocket and WebTransport are not subject to CORS (both accept any origin for the same reason).
type CORS struct {
	// Origins are the allowed origins, each "scheme://host[:port]" as a browser sends it in Origin, or "*"
	// for any origin. Empty: no cross-origin access (no CORS headers at all).
	Origins []string
}

// ParseCORSOrigins reads a comma-separated allowlist ("*" for any origin; "" for none), checking each origin.
func ParseCORSOrigins(s string) ([]string, error) {
	var out []string
	for o := range strings.SplitSeq(s, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o != "*" {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
				(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
				return nil, fmt.Errorf("CORS origin %q: want scheme://host[:port] or *", o)
			}
			o = strings.ToLower(u.Scheme + "://" + u.Host)
		}
		out = append(out, o)
	}
	if len(out) > 1000 {
		return nil, errors.New("CORS origins: at most 1000")
	}
	return out, nil
}

// Bounds and lists of the CORS answers.
const (
	corsMaxAge         = "600" // seconds a browser may cache a preflight answer
	corsAllowedMethods = "GET, POST, PUT, DELETE"
	// The request headers the SDKs send; anything else is refused at preflight by the browser.
	corsAllowedHeaders = "Authorization, Content-Type, Accept, Last-Event-ID, X-Request-Id"
	corsExposedHeaders = "X-Request-Id, Retry-After, Content-Length"
)

// corsPath reports whether the path is one of the API paths that answer cross-origin requests.
func corsPath(p string) bool {
	return p == "/v1/regions" || p == "/v1/me" || p == "/v1/sessions" || strings.HasPrefix(p, "/v1/sessions/") || strings.HasPrefix(p, "/v1/sandbox/")
}

// allows reports whether origin is allowed, and the Access-Control-Allow-Origin value for it.
func (c *CORS) allows(origin string) (string, bool) {
	if c == nil || origin == "" || len(origin) > 1024 {
		return "", false
	}
	lower := strings.ToLower(origin)
	for _, o := range c.Origins {
		if o == "*" {
			return "*", true
		}
		if o == lower {
			return origin, true
		}
	}
	return "", false
}

// withCORS answers preflights of the CORS paths and adds the CORS headers to their answers for allowed
// origins. A refused origin's preflight is permission_denied with no Access-Control-* headers, so the
// browser refuses the request; its simple requests are served without them, so the page cannot read the
// answer.
func (e *Edge) withCORS(next http.Handler) http.Handler {
	c := e.cfg.CORS
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !corsPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		allow, ok := c.allows(origin)
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if preflight {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			if !ok {
				wire.WriteHTTPError(w, e.log.With("request_id", httpx.RequestID(r.Context())),
					wire.Errorf(wire.PermissionDenied, "origin %.200q may not call this edge's API (CORS allowlist)", origin))
				return
			}
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Allow-Methods", corsAllowedMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowedHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if ok {
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Expose-Headers", corsExposedHeaders)
		}
		next.ServeHTTP(w, r)
	})
}
