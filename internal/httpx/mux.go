package httpx

import (
	"net/http"
	"slices"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
)

// Mux is an http.ServeMux whose own answers are wire errors (docs/PROTOCOL.md#errors) rather than Go's
// plain text: a path no pattern matches is not_found, and a method the matching patterns do not serve is
// invalid_argument with an Allow header and details.allow (there is no 405 code). Register routes with
// Handle and HandleFunc as on a ServeMux, methods in the patterns ("GET /v1/regions"). The zero Mux is
// ready to use; a Mux must not be copied after first use.
type Mux struct {
	http.ServeMux
	// What names the API in not_found messages ("edge API"); "" says "API".
	What string
	// Authorize, when set, is asked before the mux answers no route or a wrong method, and its error is
	// the answer: an API whose every route needs a key tells a caller without one nothing about what
	// exists. Routes authorize themselves.
	Authorize func(*http.Request) error
}

// ServeHTTP serves r with the handler of the most specific matching pattern, or answers the wire error.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := m.Handler(r); pattern != "" {
		m.ServeMux.ServeHTTP(w, r)
		return
	}
	if m.Authorize != nil {
		if err := m.Authorize(r); err != nil {
			wire.WriteHTTPError(w, nil, err)
			return
		}
	}
	// No pattern matched: ask the ServeMux's own answer for what it would say (404, or 405 with the
	// methods that would have matched), then say it as a wire error.
	var probe probeWriter
	h, _ := m.Handler(r)
	h.ServeHTTP(&probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		MethodNotAllowed(w, r, strings.Split(probe.header.Get("Allow"), ", "))
		return
	}
	what := m.What
	if what == "" {
		what = "API"
	}
	wire.WriteHTTPError(w, nil, NotFound(what, r))
}

// NotFound is the not_found error of a request no route of the API what serves.
func NotFound(what string, r *http.Request) *wire.Error {
	return wire.Errorf(wire.NotFound, "the %s has no route %s %s", what, r.Method, clipPath(r.URL.Path))
}

// MethodNotAllowed answers a request whose path exists but not for its method: invalid_argument (there
// is no 405 code, docs/PROTOCOL.md#errors) with the methods allowed in the Allow header and details.allow.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	allow = slices.DeleteFunc(slices.Clone(allow), func(s string) bool { return s == "" })
	slices.Sort(allow)
	allow = slices.Compact(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	wire.WriteHTTPError(w, nil, wire.Errorf(wire.InvalidArgument, "method %s is not allowed on %s: use %s",
		clipMethod(r.Method), clipPath(r.URL.Path), strings.Join(allow, " or ")).WithDetails(map[string]any{"allow": allow}))
}

// Methods serves a path by method; another method gets MethodNotAllowed. Use it under patterns without a
// method where one path has several handlers and a middleware (auth) must run before the method is judged.
type Methods map[string]http.HandlerFunc

// ServeHTTP calls the method's handler.
func (m Methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := m[r.Method]; ok {
		h(w, r)
		return
	}
	allow := make([]string, 0, len(m))
	for k := range m {
		allow = append(allow, k)
	}
	MethodNotAllowed(w, r, allow)
}

// probeWriter takes the ServeMux's own 404 or 405 answer to read its status and Allow header.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header {
	if p.header == nil {
		p.header = http.Header{}
	}
	return p.header
}
func (p *probeWriter) WriteHeader(code int)        { p.status = code }
func (p *probeWriter) Write(b []byte) (int, error) { return len(b), nil }

// clipPath bounds a path quoted in an error message (a client's path can be long).
func clipPath(p string) string {
	const max = 200
	if len(p) > max {
		return p[:max] + "…"
	}
	return p
}

// clipMethod bounds a method quoted in an error message.
func clipMethod(m string) string {
	if len(m) > 20 {
		return m[:20] + "…"
	}
	return m
}
