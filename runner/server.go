package runner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus/promhttp"

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
// caller learns nothing about what exists). The features mount theirs (features.go).
func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", web.Methods{http.MethodGet: a.healthz})
	mux.Handle("/metrics", a.auth(web.Methods{http.MethodGet: promhttp.HandlerFor(a.r.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP}))
	mux.Handle("/v1/lease", a.keyed(web.Methods{http.MethodPut: a.putLease}))
	s := web.Serve{Mux: mux, Auth: a.auth, Root: a.root, Work: a.work, Conns: a.conns}
	for _, f := range a.r.features {
		f.Routes(s)
	}
	mux.Handle("/", a.auth(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		web.Fail(w, req, wire.Errorf(wire.NotFound, "no route for %s", req.URL.Path))
	})))
	return a.withRequest(mux)
}

// withRequest gives every request an id (X-Request-Id when the caller sent a sane one, else random),
// echoes it, puts a logger carrying it in the context, and logs the request at debug level.
func (a *api) withRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		log := a.r.log.With("request_id", id)
		sw := &web.StatusWriter{ResponseWriter: w}
		start := a.r.cfg.Now()
		next.ServeHTTP(sw, req.WithContext(web.WithLogger(req.Context(), log)))
		log.Debug("request", "method", req.Method, "path", req.URL.Path, "status", sw.Status,
			"duration_ms", a.r.cfg.Now().Sub(start).Milliseconds())
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("-_.:", c) >= 0) {
			return false
		}
	}
	return true
}

// keyed requires "Authorization: Bearer <Key>" and nothing else: the scheduler's lease pushes, which must
// not count as the user's activity (they would keep an idle sandbox awake for ever). Both sides are hashed
// before the constant-time comparison so neither the content nor the length of the key leaks through
// timing.
func (a *api) keyed(next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(a.r.cfg.Key))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		tok, ok := bearer(req.Header.Get("Authorization"))
		got := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warren-runner"`)
			web.Fail(w, req, wire.Errorf(wire.Unauthenticated, "missing or invalid runner key"))
			return
		}
		next.ServeHTTP(w, req)
	})
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

func bearer(h string) (string, bool) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
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
	tok, ok := bearer(req.Header.Get("Authorization"))
	got, want := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(a.r.cfg.Key))
	if !ok || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		web.WriteJSON(w, http.StatusOK, Health{Status: "ok"})
		return
	}
	mode := "bwrap"
	if a.r.sandbox.Insecure() {
		mode = "insecure"
	}
	web.WriteJSON(w, http.StatusOK, Health{
		Status: "ok", Issuer: a.r.cfg.Issuer, User: a.r.cfg.User, Epoch: a.r.cfg.Epoch,
		Clients: a.r.Clients(), RunningCommands: a.r.RunningCommands(), Sandbox: mode,
	})
}
