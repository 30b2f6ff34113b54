// Package web is the HTTP plumbing the runner and its feature packages share: the method table and item
// routes, the request's logger, wire errors, JSON and server-sent event writers, and Serve, what one Run
// hands each feature to mount its routes.
package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/workspace"
)

// Serve is what one Run hands a feature to mount its routes: the mux, the runner's key check with the
// activity that keeps the sandbox awake (Auth), the workspace, the runner's work (programs a request
// starts live as long as it, not as the request) and the hijacked connections shutdown waits for.
type Serve struct {
	Mux   *http.ServeMux
	Auth  func(http.Handler) http.Handler
	Root  *workspace.Root
	Work  context.Context
	Conns *sync.WaitGroup
}

// Handle mounts h at pattern behind Auth.
func (s Serve) Handle(pattern string, h http.Handler) { s.Mux.Handle(pattern, s.Auth(h)) }

// StatusWriter records the status of an answer (for the access log, the preview relay's counts). Unwrap
// lets http.ResponseController (flushing) and the WebSocket upgrade (hijacking) reach the real writer.
type StatusWriter struct {
	http.ResponseWriter
	Status int // the first status written; 0 before
}

func (s *StatusWriter) WriteHeader(code int) {
	if s.Status == 0 {
		s.Status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *StatusWriter) Write(b []byte) (int, error) {
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *StatusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Methods dispatches on the HTTP method; others are answered with a wire error (docs/PROTOCOL.md#errors has
// no 405 code, so it is invalid_argument) and an Allow header.
type Methods map[string]http.HandlerFunc

func (m Methods) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if h, ok := m[req.Method]; ok {
		h(w, req)
		return
	}
	allow := make([]string, 0, len(m))
	for k := range m {
		allow = append(allow, k)
	}
	sort.Strings(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	wire.WriteHTTPError(w, nil, wire.Errorf(wire.InvalidArgument, "method %s is not allowed here", req.Method))
}

// ItemRoute serves prefix{id}[/action] with the handler of action (not_found for another), the id as the
// path value "id".
func ItemRoute(prefix string, actions map[string]http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		id, action, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, prefix), "/")
		h, ok := actions[action]
		if !ok {
			Fail(w, req, wire.Errorf(wire.NotFound, "no route for %s", req.URL.Path))
			return
		}
		req.SetPathValue("id", id)
		h.ServeHTTP(w, req)
	}
}

type logKey struct{}

// WithLogger returns ctx carrying the request's logger (the runner's, with the request id).
func WithLogger(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, logKey{}, log)
}

// Logger is the request's logger (set by the runner for every request); slog.Default without one.
func Logger(req *http.Request) *slog.Logger {
	if l, ok := req.Context().Value(logKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// Fail writes err as a wire error; causes of internal errors are logged with the request id.
func Fail(w http.ResponseWriter, req *http.Request, err error) {
	wire.WriteHTTPError(w, Logger(req), err)
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// StartEvents commits to a stream of server-sent events (200, not cached, not buffered by proxies) and
// returns the controller that flushes it.
func StartEvents(w http.ResponseWriter) *http.ResponseController {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	return rc
}

// KeepAlive is how often an idle event stream sends an SSE comment, so proxies do not close it.
const KeepAlive = 15 * time.Second

// WriteEvent writes one server-sent event. JSON never contains a raw newline, so data is one line.
func WriteEvent(w io.Writer, event string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"code":"internal","message":"internal error"}`)
	}
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
}

// IsUpgrade reports whether req asks for a WebSocket upgrade.
func IsUpgrade(req *http.Request) bool {
	if !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		return false
	}
	for _, v := range req.Header.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return true
			}
		}
	}
	return false
}

// BoolQuery reads an optional true/false query parameter.
func BoolQuery(req *http.Request, name string) (bool, error) {
	v := req.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, wire.Errorf(wire.InvalidArgument, "%s must be true or false", name)
	}
	return b, nil
}

// TruncateID bounds an id a client sent before it is quoted in an error.
func TruncateID(id string) string {
	if len(id) > 64 {
		return id[:64] + "..."
	}
	return id
}
