// Package web is the HTTP plumbing the runner and its feature packages share beyond internal/httpx (the
// bearer rule, request ids, method tables, JSON and server-sent event writers, which every role shares):
// item routes, the request's logger, wire errors, query and upgrade checks, and Serve, what one Run hands
// each feature to mount its routes.
package web

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/warren-mesh/warren/internal/httpx"
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

// ItemRoute serves prefix{id}[/action] with the handler of action (not_found for another), the id as the
// path value "id".
func ItemRoute(prefix string, actions map[string]http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		id, action, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, prefix), "/")
		h, ok := actions[action]
		if !ok {
			Fail(w, req, NoRoute(req))
			return
		}
		req.SetPathValue("id", id)
		h.ServeHTTP(w, req)
	}
}

// NoRoute is the not_found of a request no route of the runner's API serves (httpx.NotFound).
func NoRoute(req *http.Request) *wire.Error { return httpx.NotFound("runner API", req) }

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
