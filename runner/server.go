package runner

import (
	"context"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/session"
	"github.com/warren-mesh/warren/runner/workspace"
)

// api is the HTTP surface of one Run: the runner and what the Run hands its features (web.Serve).
type api struct {
	r     *Runner
	root  *workspace.Root
	hub   *session.Hub
	work  context.Context // the runner's work: background processes live as long as it
	conns *sync.WaitGroup // agent WebSocket handlers, which http.Server.Shutdown does not wait for
}

// routes: every route but /healthz requires the bearer key, including unknown paths (an unauthenticated
// caller learns nothing about what exists). The features mount theirs (features.go). Every pattern is
// method-less and dispatches with httpx.Methods behind the key check, so the catch-all answers every path
// no route serves, and a wrong method is the typed invalid_argument with Allow, as on every role's API.
func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", httpx.Methods{http.MethodGet: a.healthz})
	mux.Handle("/metrics", a.auth(httpx.Methods{http.MethodGet: promhttp.HandlerFor(a.r.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP}))
	mux.Handle("/v1/lease", a.keyed(httpx.Methods{http.MethodPut: a.putLease}))
	s := web.Serve{Mux: mux, Auth: a.auth, Root: a.root, Work: a.work, Conns: a.conns}
	for _, f := range a.r.features {
		f.Routes(s)
	}
	mux.Handle("/", a.auth(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		web.Fail(w, req, web.NoRoute(req))
	})))
	return httpx.RequestIDs(a.logRequests(mux))
}

// logRequests puts a logger carrying the request's id (httpx.RequestIDs) in the context and logs the
// request at debug level.
func (a *api) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		log := a.r.log.With("request_id", httpx.RequestID(req.Context()))
		sw := httpx.NewStatusWriter(w)
		start := a.r.cfg.Now()
		next.ServeHTTP(sw, req.WithContext(web.WithLogger(req.Context(), log)))
		log.Debug("request", "method", req.Method, "path", req.URL.Path, "status", sw.Status(),
			"duration_ms", a.r.cfg.Now().Sub(start).Milliseconds())
	})
}

// keyed requires "Authorization: Bearer <Key>" (docs/PROTOCOL.md#auth-header) and nothing else: the
// scheduler's lease pushes, which must not count as the user's activity (they would keep an idle sandbox
// awake for ever).
func (a *api) keyed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !a.hasKey(req) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warren-runner"`)
			web.Fail(w, req, wire.Errorf(wire.Unauthenticated, "missing or invalid runner key"))
			return
		}
		next.ServeHTTP(w, req)
	})
}

// hasKey reports whether req carries the runner's key, compared in constant time (httpx.KeyEqual).
func (a *api) hasKey(req *http.Request) bool {
	tok, ok := httpx.BearerOf(req)
	return ok && httpx.KeyEqual(tok, a.r.cfg.Key)
}

// auth is keyed plus what a request of the edge carries: the grant it admitted, and activity that keeps
// the sandbox awake.
func (a *api) auth(next http.Handler) http.Handler {
	return a.keyed(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The edge says who it admitted; the newest grant decides which budget window the agent charges.
		if h := req.Header.Get(wire.HeaderGrant); h != "" {
			g, err := wire.DecodeGrant(h)
			if err != nil {
				web.Fail(w, req, err)
				return
			}
			a.r.grant.Store(&g)
			a.r.applyLimits(g.Limits)
		}
		// Activity keeps the sandbox awake, however short the request (the idle check samples).
		a.r.inflight.Add(1)
		a.r.lastActive.Store(a.r.cfg.Now().UnixNano())
		defer func() {
			a.r.lastActive.Store(a.r.cfg.Now().UnixNano())
			a.r.inflight.Add(-1)
		}()
		next.ServeHTTP(w, req)
	}))
}

// Health is the body of GET /healthz. Without the runner's key only Status is filled: whose sandbox this
// is and what it does is for the edge (and the operator) alone.
type Health struct {
	Status          string `json:"status"`
	Issuer          string `json:"issuer,omitempty"`
	User            string `json:"user,omitempty"`
	Epoch           int64  `json:"epoch,omitempty"`
	Clients         int    `json:"clients,omitempty"`
	RunningCommands int    `json:"running_commands,omitempty"`
	Sandbox         string `json:"sandbox,omitempty"` // "bwrap" or "insecure"
}

func (a *api) healthz(w http.ResponseWriter, req *http.Request) {
	if !a.hasKey(req) {
		_ = httpx.WriteJSON(w, http.StatusOK, Health{Status: "ok"})
		return
	}
	mode := "bwrap"
	if a.r.sandbox.Insecure() {
		mode = "insecure"
	}
	_ = httpx.WriteJSON(w, http.StatusOK, Health{
		Status: "ok", Issuer: a.r.cfg.Issuer, User: a.r.cfg.User, Epoch: a.r.cfg.Epoch,
		Clients: a.r.Clients(), RunningCommands: a.r.RunningCommands(), Sandbox: mode,
	})
}
