// Package edge is the front door of a region (docs/ARCHITECTURE.md#edge): it authenticates end users' tokens,
// admits them against their budget, finds or starts their one sandbox, and relays the agent channel
// (WebSocket) and the sandbox REST API to the user's runner over real connections.
package edge

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
)

// Verifier checks an end user's JWT. Safe for concurrent use; errors are *wire.Error.
type Verifier interface {
	Verify(ctx context.Context, raw string) (*token.Claims, error)
}

// SandboxRequest names the sandbox a request needs and the account its compute time is charged to.
type SandboxRequest struct {
	Issuer       string
	User         string
	Account      billing.Account
	ComputeLimit int64     // seconds in Account's window; < 0 unlimited
	Anchor       time.Time // non-zero: Account's window rolls over from it (the token's windowStart)
	Template     string    // the token's template claim: a new sandbox starts from it ("": the runner's default)
}

// Sandboxes finds or starts users' runners (the scheduler). Safe for concurrent use.
type Sandboxes interface {
	// Ensure returns the live runner of the user, starting one if needed. Errors are *wire.Error.
	Ensure(ctx context.Context, req SandboxRequest) (registry.Entry, error)
	// Forget reports that e could not be reached, so the next Ensure starts a fresh runner.
	Forget(ctx context.Context, e registry.Entry)
}

// Config configures an edge.
type Config struct {
	Region    string
	Verifier  Verifier
	Sandboxes Sandboxes
	Ledger    billing.Ledger // admission checks
	Quotas    billing.Quotas // optional: per-issuer and per-user quotas cap the token's budget
	// Issuers, when set with Quotas, is read with the quotas: a disabled issuer's tokens are refused
	// (permission_denied, details.reason issuer_disabled) by agent channels at once and by the sandbox API
	// within AdmissionCacheTTL. An issuer not registered is not refused.
	Issuers billing.Issuers
	// Sessions, when set, holds a lease per agent connection so the quota's max_concurrent_sessions (per
	// user) and max_issuer_sessions (all of an issuer's users) hold across every edge (the runner also caps
	// live sessions per user).
	Sessions billing.Sessions
	// RateBuckets, when set, holds the rate buckets below in the shared store, so a user's and an issuer's
	// rates hold across every edge as the caps do. When the store fails or does not answer within 500 ms,
	// this edge's own in-process buckets decide for the next 5 s (each edge then limits on its own, from
	// full buckets; warren_edge_rate_fallbacks_total counts those decisions). Unset: in-process buckets.
	RateBuckets billing.RateBuckets
	// Rates limit agent connects and prompts per minute, per user and per issuer (the zero Rates:
	// DefaultRates; negative: unlimited). They are defaults: a rate a quota sets takes the place of its
	// default, read when the agent channel opens (billing.EffectiveLimitWith).
	Rates Rates
	// Directory, when set, lists the edges of every region for GET /v1/regions (regions.Summarize);
	// nil: this region alone, at the address the request reached.
	Directory regions.Directory
	// Mesh, when set (with Directory), forwards a user another region holds to a live edge of that region
	// (docs/ARCHITECTURE.md#regions); that node's Handler must be ServeMesh and its KnownRegions
	// KnownRegion. Unset: such a user is refused with unavailable naming the region (details.region).
	Mesh Mesh
	// WebTransport, when set, also serves the agent channel over WebTransport (WebTransportServer) and
	// lists its URL (and a self-signed certificate's hashes) in GET /v1/regions.
	WebTransport *WebTransport
	// CORS, when set, lets browser pages of the allowed origins call GET /v1/regions and the sandbox API
	// (edge/cors.go); nil: no CORS headers, so only same-origin pages can read the answers.
	CORS         *CORS
	PingInterval time.Duration // server pings a silent WebSocket client this often (default 30s)
	// InitTimeout is how long an agent channel may take to send its first message, init (default 30s);
	// nothing is admitted, leased or started for it before (docs/PROTOCOL.md#client-messages).
	InitTimeout time.Duration
	// ReconnectGrace is how long a channel that sends nothing waits before the edge resumes it into its
	// user's one session whose client was lost (a reconnect without init that sends nothing:
	// docs/PROTOCOL.md#opening; default 3s; at or above InitTimeout: never).
	ReconnectGrace time.Duration
	Logger         *slog.Logger
	Metrics        prometheus.Registerer
	HTTPClient     *http.Client // for calls to runners; default has sane timeouts
	// Now is the clock that picks a token's current budget window (nil: time.Now).
	Now func() time.Time
	// AdmissionCacheTTL is how long a sandbox API request's quota reads (the issuer's and the user's quota)
	// serve the same user's next requests: 0 is DefaultAdmissionCacheTTL, negative reads the store for
	// every request. A quota changed meanwhile applies to sandbox API requests within this time; the usage
	// is read for every admission, and agent channels read the quotas afresh.
	AdmissionCacheTTL time.Duration
	// Previews, when set, serves preview URLs of ports of users' sandboxes (edge/preview.go).
	Previews *PreviewConfig
}

// Rates are per-minute limits; the burst equals the rate. They are billing's, which quotas override.
type Rates = billing.Rates

// DefaultRates are generous: they stop runaway clients, not people.
var DefaultRates = Rates{ConnectsPerUser: 120, ConnectsPerIssuer: 6000, PromptsPerUser: 60, PromptsPerIssuer: 6000}

// Edge serves end users. Safe for concurrent use.
type Edge struct {
	cfg     Config
	limiter *Limiter
	shared  sharedRates
	log     *slog.Logger
	m       *edgeMetrics
	runners *http.Client
	lean    *leanHop // plain requests to local runners (leanhop.go); nil with Config.HTTPClient
	mux     *httpx.Mux
	peers   *peers
	mpool   *meshPool // kept mesh streams of forwarded requests (meshpool.go)
	// meshIdle is how long a kept stream waits for its next exchange here (meshServeIdleTimeout; shorter
	// in tests).
	meshIdle atomic.Int64
	admits   admissionCache
	pv       *previewState // nil without Config.Previews
	waiting  waitingInit   // agent channels authenticated and waiting for init, per user (channelinit.go)
	resumes  resumeMemory  // what agent channels delivered, per user and session (resume.go)

	leases *leaseKeeper // renews the session leases of agent channels together (lease.go)

	stopMu   sync.Mutex         // guards stopped and channels.Add
	stopped  bool               // Shutdown was called
	stopCtx  context.Context    // done once Shutdown is called: every agent channel ends (shutdown.go)
	stopAll  context.CancelFunc // ends stopCtx
	stopping <-chan struct{}    // stopCtx.Done()
	channels sync.WaitGroup     // agent channels being served (http.Server.Shutdown does not track them)
}

// New validates cfg and returns an Edge.
func New(cfg Config) (*Edge, error) {
	if cfg.Verifier == nil || cfg.Sandboxes == nil || cfg.Ledger == nil {
		return nil, errors.New("edge: verifier, sandboxes and ledger are required")
	}
	if cfg.Region == "" {
		return nil, errors.New("edge: region is required")
	}
	if err := cfg.Previews.check(); err != nil {
		return nil, err
	}
	if cfg.Mesh != nil && cfg.Directory == nil {
		return nil, errors.New("edge: a mesh needs the region directory")
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.InitTimeout <= 0 {
		cfg.InitTimeout = 30 * time.Second
	}
	if cfg.ReconnectGrace <= 0 {
		cfg.ReconnectGrace = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AdmissionCacheTTL == 0 {
		cfg.AdmissionCacheTTL = DefaultAdmissionCacheTTL
	}
	if cfg.Rates == (Rates{}) {
		cfg.Rates = DefaultRates
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	stopCtx, stopAll := context.WithCancel(context.Background())
	e := &Edge{cfg: cfg, log: cfg.Logger, m: m, stopCtx: stopCtx, stopAll: stopAll, stopping: stopCtx.Done(), runners: cfg.HTTPClient, limiter: NewLimiter(nil, 0),
		peers: &peers{dir: cfg.Directory, self: cfg.Region}, mpool: newMeshPool(), admits: newAdmissionCache(cfg.AdmissionCacheTTL)}
	if e.runners == nil {
		e.runners = &http.Client{Transport: &http.Transport{
			Proxy:                 nil,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 0, // exec may legitimately take minutes before its first byte
		}}
		e.lean = newLeanHop(e.runners.Transport)
	}
	e.resumes.now = cfg.Now
	e.leases = newLeaseKeeper(cfg.Sessions, leaseRenewEvery)
	e.meshIdle.Store(int64(meshServeIdleTimeout))
	e.routes()
	return e, nil
}

// Handler is the edge's HTTP handler: /ws (and /ws/, and a WebSocket upgrade at /), /v1/sandbox/*, /v1/sessions[/*], /v1/regions, /healthz,
// /readyz.
func (e *Edge) Handler() http.Handler { return e.PreviewHosts(httpx.RequestIDs(e.withCORS(e.mux))) }

func (e *Edge) routes() {
	mux := &httpx.Mux{What: "edge API"} // unknown paths and methods are wire errors
	mux.HandleFunc("GET /ws", e.serveWS)
	mux.HandleFunc("GET /ws/{$}", e.serveWS) // a trailing slash is the same endpoint
	mux.HandleFunc("GET /{$}", e.serveRoot)  // an upgrade at the bare base URL is the agent channel too
	mux.Handle("/v1/sandbox/", http.HandlerFunc(e.serveSandbox))
	mux.Handle("/v1/sessions", http.HandlerFunc(e.serveSandbox))
	mux.Handle("/v1/sessions/", http.HandlerFunc(e.serveSandbox))
	mux.HandleFunc("GET /v1/regions", e.serveRegions)
	mux.HandleFunc("GET /v1/me", e.serveMe)       // the caller's own view (me.go)
	mux.HandleFunc("/v1/execute", e.serveExecute) // one-shot tasks (execute.go)
	mux.HandleFunc("/v1/execute/", e.serveExecute)
	e.previewRoutes(&mux.ServeMux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_ = httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		_ = httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	e.mux = mux
}
