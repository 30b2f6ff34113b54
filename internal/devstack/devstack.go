// Package devstack wires the whole platform into one process for `warren dev` and for end-to-end tests:
// edge + scheduler + billing over the embedded adapters (file secrets, in-process registry, SQLite
// placements and ledger, local process driver). Runners are separate `warren runner` processes, so every
// frame between edge and runner crosses a real connection.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warren-mesh/warren/billing"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/playground"
	previewsqlite "github.com/warren-mesh/warren/internal/previews/sqlite"
	"github.com/warren-mesh/warren/internal/regions"
	regionsqlite "github.com/warren-mesh/warren/internal/regions/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/local"
	"github.com/warren-mesh/warren/scheduler/runnerlease"
	schedsqlite "github.com/warren-mesh/warren/scheduler/sqlite"
)

// DevIssuer is the issuer created on first start.
const DevIssuer = "dev"

// DemoModelPrice is what the scripted model's tokens cost, USD per million of any kind: a demo price, far
// below any real model's, so that the CLI's ~25k-token system prompt does not eat a tour's budget. The
// runner prices with it (-model-demo-price) instead of the price table, which it never changes.
const DemoModelPrice = "0.10"

// DemoModelNotice is shown in every control ready when the scripted model answers; DemoPriceNotice is
// added when it is billed at Config.DemoPrice.
const (
	DemoModelNotice = "no ANTHROPIC_API_KEY: a built-in scripted demo model answers, not Claude"
	DemoPriceNotice = ", at a demo price of $%s per million tokens"
)

// Config configures the dev stack.
type Config struct {
	DataDir       string        // required; created if missing
	Listen        string        // default 127.0.0.1:8080; "127.0.0.1:0" picks a free port
	Region        string        // default "local"
	Binary        string        // the warren binary runners are started from (default: this executable)
	Insecure      bool          // run user commands without bubblewrap
	HostNetwork   bool          // sandboxes share this machine's network (-sandbox-network=host)
	RunnerArgs    []string      // extra flags for every runner
	StartTimeout  time.Duration // per sandbox start (default 30s)
	MeterInterval time.Duration // compute metering period (default 10s)
	Logger        *slog.Logger

	// ClaudeCLI enables the agent: the Claude Code CLI runners start inside the sandbox. "" disables it.
	ClaudeCLI string
	// ModelAPIKey is the real model API key; without it the built-in scripted model answers (loudly).
	ModelAPIKey string
	// DemoPrice, when the scripted model answers, bills its tokens at this many USD per million of any
	// kind instead of the price table (runner -model-demo-price; warren dev sets DemoModelPrice, so a
	// tour's prompts cost what the demo is worth); "" bills them at the table, as a real model would be
	// (the tests of budgets and prices).
	DemoPrice     string
	ModelUpstream string            // default https://api.anthropic.com (ignored without a key)
	AgentEnv      map[string]string // extra env for every agent (e.g. ANTHROPIC_CUSTOM_HEADERS)
	DefaultModel  string
	IdleTimeout   time.Duration // sandboxes sleep after this long idle (0: never)
	AgentIdle     time.Duration // agent processes stop this long after the last client left (0: the runner's default)
	Rates         edge.Rates    // zero: edge.DefaultRates
	// Previews configures preview URLs (their store is always the placements' SQLite file); nil: the
	// defaults, path-based (/preview/<token>/ on PreviewListen).
	Previews *edge.PreviewConfig
	// PreviewListen is where path previews are served, an origin of their own: on the edge's, a preview's
	// page could call what trusts that origin (the playground's token endpoint). Default: Listen's host at
	// the next port (127.0.0.1:8081), or port 0 when Listen's is 0.
	PreviewListen string
	// NoWebTransport turns WebTransport off; otherwise the edge serves it on UDP at the TCP port number,
	// with a self-signed certificate (WebTransportCert, default a fresh edge.SelfSigned for the listen
	// address and localhost) whose hash GET /v1/regions publishes. A UDP port that cannot be bound only
	// turns it off, with a warning.
	NoWebTransport   bool
	WebTransportCert *edge.SelfSigned
	// CORSOrigins are the origins whose browser pages may call the edge's HTTP API (edge.CORS); nil: any
	// origin ("*"), as tokens are bearer headers, not cookies. Empty and non-nil: none.
	CORSOrigins []string
	// NoWebhooks starts runners without a webhook secret: tasks asking for a webhook are refused. Otherwise
	// the data dir's webhook secret (WebhookSecretFile, created on first start) signs them, and runners may
	// deliver them over http to loopback and private addresses (-webhook-allow-private), so that a backend
	// on this machine receives them.
	NoWebhooks bool
	// HTTP is the listener's limits (internal/httpx, as every role's listener); zero fields take httpx's
	// defaults, the production edge's.
	HTTP httpx.Config
}

// Stack is a running platform.
type Stack struct {
	cfg       Config
	log       *slog.Logger
	ln        net.Listener
	srv       *http.Server
	edge      *edge.Edge
	pvLn      net.Listener // path previews' origin (edge.PreviewHandler)
	pvSrv     *http.Server
	secrets   *file.Store
	DevKey    secrets.Key // the dev issuer's current key
	AdminKey  string      // bearer key of the billing API
	Created   bool        // the dev issuer was created by this start
	Registry  registry.Registry
	Scheduler *scheduler.Scheduler
	Ledger    billing.Ledger
	// Model is the scripted model server when no API key was given (nil otherwise).
	Model *modelserver.Server

	closers []func() error
	served  chan error
	edgeCfg edge.Config
	wtURL   string
	wtStop  func() error

	webhookMaster []byte // the operator's webhook secret (nil with NoWebhooks)
}

// ErrNoBubblewrap is returned when bwrap is missing and Insecure is not set.
var ErrNoBubblewrap = errors.New("bubblewrap (bwrap) is not installed: install it (`make tools` or `apt-get install bubblewrap`) or pass -insecure-no-sandbox to run user commands without isolation")

// Start brings the platform up and serves until Close.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("devstack: data dir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:8080"
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	if cfg.PreviewListen == "" {
		if cfg.PreviewListen, err = nextPort(cfg.Listen); err != nil {
			return nil, fmt.Errorf("devstack: preview listen address: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Binary == "" {
		if cfg.Binary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("devstack: find own binary: %w", err)
		}
	}
	if !cfg.Insecure {
		if _, err := exec.LookPath("bwrap"); err != nil {
			return nil, ErrNoBubblewrap
		}
	}
	// Runners run with their own state dir as working directory: every path handed to them is absolute.
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("devstack: data dir: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("devstack: data dir: %w", err)
	}
	s := &Stack{cfg: cfg, log: cfg.Logger, served: make(chan error, 2)}
	defer func() {
		if err != nil {
			for _, ln := range []net.Listener{s.ln, s.pvLn} {
				if ln != nil {
					ln.Close()
				}
			}
			s.closeAll()
		}
	}()

	if s.secrets, err = file.Open(filepath.Join(cfg.DataDir, file.DefaultFileName)); err != nil {
		return nil, fmt.Errorf("devstack: secrets: %w", err)
	}
	if s.DevKey, s.Created, err = s.secrets.EnsureIssuer(DevIssuer); err != nil {
		return nil, fmt.Errorf("devstack: dev issuer: %w", err)
	}
	if s.AdminKey, _, err = s.secrets.EnsureAdminKey(); err != nil {
		return nil, fmt.Errorf("devstack: admin key: %w", err)
	}
	placements, err := schedsqlite.New(ctx, schedsqlite.Config{Path: filepath.Join(cfg.DataDir, "placements.db")})
	if err != nil {
		return nil, fmt.Errorf("devstack: placements: %w", err)
	}
	s.closers = append(s.closers, placements.Close)
	ledger, err := billingsqlite.New(ctx, billingsqlite.Config{Path: filepath.Join(cfg.DataDir, "ledger.db")})
	if err != nil {
		return nil, fmt.Errorf("devstack: ledger: %w", err)
	}
	s.closers = append(s.closers, ledger.Close)
	s.Ledger = ledger
	// The billing API rotates keys only for registered issuers.
	if _, err := ledger.GetIssuer(ctx, DevIssuer); errors.Is(err, billing.ErrNotFound) {
		if _, err := ledger.PutIssuer(ctx, DevIssuer, "warren dev"); err != nil {
			return nil, fmt.Errorf("devstack: register dev issuer: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("devstack: dev issuer: %w", err)
	}
	s.Registry = mem.New()

	var runnerArgs []string
	if !cfg.NoWebhooks {
		if s.webhookMaster, err = ensureWebhookMaster(cfg.DataDir); err != nil {
			return nil, err
		}
		// Before RunnerArgs, which may override them.
		runnerArgs = append(runnerArgs, "-webhook-secret-file", WebhookSecretPath(cfg.DataDir), "-webhook-allow-private")
	}
	runnerArgs = append(runnerArgs, cfg.RunnerArgs...)
	runnerEnv := []string{}
	blobDir := filepath.Join(cfg.DataDir, "blobs")
	runnerArgs = append(runnerArgs, "-blob-dir", blobDir)
	if cfg.AgentIdle > 0 {
		runnerArgs = append(runnerArgs, "-agent-idle", cfg.AgentIdle.String())
	}
	if cfg.IdleTimeout > 0 {
		runnerArgs = append(runnerArgs, "-idle-timeout", cfg.IdleTimeout.String())
	}
	if cfg.ClaudeCLI != "" {
		upstream := cfg.ModelUpstream
		if upstream == "" {
			upstream = "https://api.anthropic.com"
		}
		if cfg.ModelAPIKey == "" {
			s.Model = modelserver.New(modelserver.Options{Logger: s.log.With("component", "modelserver")})
			if upstream, err = s.Model.Start("127.0.0.1:0"); err != nil {
				return nil, fmt.Errorf("devstack: scripted model: %w", err)
			}
			s.closers = append(s.closers, s.Model.Close)
			if cfg.DemoPrice != "" {
				runnerArgs = append(runnerArgs, "-model-notice", DemoModelNotice+fmt.Sprintf(DemoPriceNotice, cfg.DemoPrice),
					"-model-demo-price", cfg.DemoPrice)
			} else {
				runnerArgs = append(runnerArgs, "-model-notice", DemoModelNotice)
			}
			// The scripted model accepts any key; the proxy insists on having one to send.
			runnerEnv = append(runnerEnv, "WARREN_MODEL_API_KEY=scripted-demo-key")
			s.log.Warn("no model API key: the built-in SCRIPTED model answers every prompt", "url", upstream)
		} else {
			runnerEnv = append(runnerEnv, "WARREN_MODEL_API_KEY="+cfg.ModelAPIKey)
		}
		runnerArgs = append(runnerArgs, "-claude-cli", cfg.ClaudeCLI, "-model-upstream", upstream,
			"-ledger-sqlite", filepath.Join(cfg.DataDir, "ledger.db"))
		if cfg.DefaultModel != "" {
			runnerArgs = append(runnerArgs, "-default-model", cfg.DefaultModel)
		}
		for _, k := range slices.Sorted(maps.Keys(cfg.AgentEnv)) {
			runnerArgs = append(runnerArgs, "-agent-env", k+"="+cfg.AgentEnv[k])
		}
	}

	if cfg.HostNetwork {
		runnerArgs = append(runnerArgs, "-sandbox-network=host")
	}
	if cfg.HostNetwork || cfg.Insecure {
		// One machine, the developer's own: previews may reach its loopback (a production runner refuses).
		runnerArgs = append(runnerArgs, "-preview-host-loopback")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	driver, err := local.New(local.Config{
		Binary: cfg.Binary, DataDir: cfg.DataDir, Insecure: cfg.Insecure, ExtraArgs: runnerArgs, Env: runnerEnv,
		Logger: s.log.With("component", "driver"),
	})
	if err != nil {
		return nil, err
	}
	s.Scheduler, err = scheduler.New(scheduler.Config{
		Region: cfg.Region, Placements: placements, Registry: s.Registry, Driver: driver, Ledger: ledger,
		StartTimeout: cfg.StartTimeout, MeterInterval: cfg.MeterInterval, Leases: &runnerlease.Client{},
		Logger: s.log.With("component", "scheduler"), Metrics: reg,
	})
	if err != nil {
		return nil, err
	}
	// Registered after the stores so it runs first on close: runners stop and meter before the ledger goes.
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), schedulerCloseTimeout)
		defer cancel()
		return s.Scheduler.Close(ctx)
	})

	timer, err := billing.NewLedgerTimer(reg)
	if err != nil {
		return nil, err
	}
	verifier := token.NewVerifier(secrets.NewCache(s.secrets, secrets.CacheOptions{}), token.VerifierOptions{})
	// The region directory lives beside the placements, as in production it shares their database.
	dir, err := regionsqlite.New(ctx, regionsqlite.Config{Path: filepath.Join(cfg.DataDir, "placements.db")})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, dir.Close)
	pvStore, err := previewsqlite.Open(ctx, filepath.Join(cfg.DataDir, "placements.db"))
	if err != nil {
		return nil, fmt.Errorf("devstack: previews: %w", err)
	}
	s.closers = append(s.closers, pvStore.Close)
	pv := edge.PreviewConfig{}
	if cfg.Previews != nil {
		pv = *cfg.Previews
	}
	pv.Store = pvStore
	pv.PathMode = true // development: one machine, the user's own previews
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("devstack: listen: %w", err)
	}
	if s.pvLn, err = net.Listen("tcp", cfg.PreviewListen); err != nil {
		return nil, fmt.Errorf("devstack: listen for path previews (an origin apart from the edge's): %w", err)
	}
	pv.PathBase = s.PreviewURL()
	var wt *edge.WebTransport
	var wtConn net.PacketConn
	if !cfg.NoWebTransport {
		if wt, wtConn = s.webTransport(); wtConn != nil {
			s.closers = append(s.closers, func() error { _ = wtConn.Close(); return nil }) // if the server never starts
		}
	}
	s.edgeCfg = edge.Config{
		Region: cfg.Region, Verifier: verifier, Sandboxes: sandboxes{s.Scheduler}, Ledger: timer.Ledger(ledger), Quotas: ledger, Issuers: ledger,
		Sessions: ledger.Sessions(), RateBuckets: ledger.RateBuckets(), Rates: cfg.Rates, Directory: dir,
		Logger: s.log.With("component", "edge"), Metrics: reg, WebTransport: wt, Previews: &pv,
	}
	if cfg.CORSOrigins == nil {
		cfg.CORSOrigins = []string{"*"}
	}
	if len(cfg.CORSOrigins) > 0 {
		s.edgeCfg.CORS = &edge.CORS{Origins: cfg.CORSOrigins}
	}
	ed, err := edge.New(s.edgeCfg)
	if err != nil {
		return nil, err
	}
	s.edge = ed
	if wt != nil {
		wts, err := ed.WebTransportServer()
		if err != nil {
			return nil, err
		}
		s.wtURL = wt.URL
		wtServed := make(chan error, 1)
		go func() { wtServed <- wts.Serve(wtConn) }()
		s.wtStop = sync.OnceValue(func() error { err := wts.Close(); <-wtServed; return errors.Join(err, wtConn.Close()) })
		s.closers = append(s.closers, s.wtStop)
	}
	mux := http.NewServeMux()
	mux.Handle("/", ed.Handler())
	mux.Handle("GET /{$}", landing(ed.Handler())) // a browser's GET of / only: the agent channel upgrades there
	api, err := billing.NewAPI(billing.APIConfig{Store: ledger, Keys: s.secrets, AdminKeys: s.secrets.AdminKeys,
		WebhookMaster: s.webhookMaster, Logger: s.log.With("component", "billing"), Metrics: reg})
	if err != nil {
		return nil, err
	}
	api.Mount(mux) // /v1/issuers, /v1/quotas/, /v1/usage, /v1/prices, /v1/openapi.json
	if err := s.mountTemplates(mux, api, blobDir, reg); err != nil {
		return nil, err
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// The playground and its token endpoint exist only here, in the dev stack (internal/playground).
	mux.Handle(playground.Prefix, playground.Handler(playground.Config{Issuer: DevIssuer, Key: s.devKey,
		Logger: s.log.With("component", "playground")}))

	// Behind PreviewHosts: a preview host's paths are its preview's, the playground's and billing's included.
	s.srv = httpx.NewServer(ed.PreviewHosts(mux), cfg.HTTP)
	go func() { s.served <- s.srv.Serve(s.ln) }()
	s.pvSrv = httpx.NewServer(ed.PreviewHandler(), cfg.HTTP)
	go func() { s.served <- s.pvSrv.Serve(s.pvLn) }()
	ann := &regions.Announcer{Dir: dir, Logger: s.log.With("component", "edge"),
		Edge: regions.Edge{Region: cfg.Region, ID: "dev", URL: "http://" + s.ln.Addr().String(), WebTransport: s.wtURL}}
	annCtx, stopAnn := context.WithCancel(context.WithoutCancel(ctx))
	announced := make(chan error, 1)
	go func() { announced <- ann.Run(annCtx) }()
	s.closers = append(s.closers, func() error { stopAnn(); return <-announced })
	s.log.Info("warren dev started", "addr", s.ln.Addr().String(), "previews", s.pvLn.Addr().String(), "data_dir", cfg.DataDir, "region", cfg.Region, "insecure", cfg.Insecure)
	return s, nil
}

// webTransport binds UDP at the TCP listener's port and returns the edge's WebTransport configuration with
// its socket; nil when the port cannot be bound (WebTransport is then off).
func (s *Stack) webTransport() (*edge.WebTransport, net.PacketConn) {
	tcp := s.ln.Addr().(*net.TCPAddr)
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: tcp.IP, Port: tcp.Port})
	if err != nil {
		s.log.Warn("WebTransport is off: the UDP port of the edge cannot be bound", "port", tcp.Port, "err", err)
		return nil, nil
	}
	// Browsers reach a hash-pinned certificate only by an IP literal.
	ip := tcp.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	cert := s.cfg.WebTransportCert
	if cert == nil {
		cert = &edge.SelfSigned{}
	}
	if len(cert.Hosts) == 0 {
		cert.Hosts = []string{ip.String(), "localhost"}
	}
	return &edge.WebTransport{
		GetCertificate:    cert.GetCertificate,
		CertificateHashes: cert.Hashes,
		URL:               "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port)) + "/wt",
	}, pc
}

// StopWebTransport stops the WebTransport server and closes its UDP socket while GET /v1/regions keeps
// listing its URL: an edge whose UDP does not get through, for tests of the WebSocket fallback.
func (s *Stack) StopWebTransport() error {
	if s.wtStop == nil {
		return errors.New("devstack: WebTransport is off")
	}
	return s.wtStop()
}

// devKey is the dev issuer's current key (rotations through the billing API included).
func (s *Stack) devKey(ctx context.Context) (secrets.Key, error) {
	keys, err := s.secrets.IssuerKeys(ctx, DevIssuer)
	if err != nil {
		return secrets.Key{}, err
	}
	return keys[0], nil
}

// PlaygroundURL is the dev playground's page.
func (s *Stack) PlaygroundURL() string { return s.URL() + playground.Prefix }

// PreviewURL is the origin of path previews (<PreviewURL>/preview/<token>/), a listener apart from the edge's
// serving nothing else.
func (s *Stack) PreviewURL() string {
	a := s.pvLn.Addr().(*net.TCPAddr)
	ip := a.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}

// nextPort is listen's host at the next port, or at port 0 when listen's is 0.
func nextPort(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n >= 65535 {
		return "", fmt.Errorf("port %q of %s has no next port", port, listen)
	}
	if n > 0 {
		n++
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// WebTransportURL is the edge's WebTransport URL ("" when WebTransport is off).
func (s *Stack) WebTransportURL() string { return s.wtURL }

// NewEdge returns another edge of the stack's region on the same verifier, scheduler, ledger, session
// leases, rate buckets and region directory, as a second edge process of the region would run (with its
// own metrics). The caller serves its Handler: tests of several edges, one of which may die.
func (s *Stack) NewEdge(name string) (*edge.Edge, error) {
	cfg := s.edgeCfg
	cfg.Logger = s.log.With("component", "edge", "edge", name)
	cfg.Metrics = prometheus.NewRegistry()
	return edge.New(cfg)
}

// Addr is the host:port the edge listens on.
func (s *Stack) Addr() string { return s.ln.Addr().String() }

// URL is the edge's base URL.
func (s *Stack) URL() string { return "http://" + s.Addr() }

// Config is the configuration the stack runs with (defaults filled in).
func (s *Stack) Config() Config { return s.cfg }

// schedulerCloseTimeout bounds how long Close waits for the scheduler to stop the runners and record
// their last compute seconds (a runner's stop and exit take 10 s + StartTimeout at most).
const schedulerCloseTimeout = time.Minute

// Close stops accepting, drains connections (bounded), stops every runner (bounded by
// schedulerCloseTimeout) and closes the stores.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if s.edge != nil {
		// Agent channels first (the HTTP server's shutdown does not track WebSockets): each gets an
		// error message, then a 1001 close.
		errs = append(errs, s.edge.Shutdown(ctx))
	}
	for _, srv := range []*http.Server{s.srv, s.pvSrv} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			_ = srv.Close()
		}
	}
	return errors.Join(append(errs, s.closeAll())...)
}

func (s *Stack) closeAll() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// Served reports the end of either HTTP server, the edge's or the previews' (an error other than http.ErrServerClosed means it failed).
func (s *Stack) Served() <-chan error { return s.served }

// sandboxes adapts the scheduler to the edge's consumer interface.
type sandboxes struct{ s *scheduler.Scheduler }

func (a sandboxes) Ensure(ctx context.Context, r edge.SandboxRequest) (registry.Entry, error) {
	return a.s.Ensure(ctx, scheduler.Request{Issuer: r.Issuer, User: r.User, Account: r.Account, ComputeLimit: r.ComputeLimit, Anchor: r.Anchor, Template: r.Template})
}

func (a sandboxes) Forget(ctx context.Context, e registry.Entry) { a.s.Forget(ctx, e) }

// SandboxStatus is edge.StatusReader: the placement, read in-process.
func (a sandboxes) SandboxStatus(ctx context.Context, issuer, user string) (edge.SandboxStatus, error) {
	st, err := a.s.Status(ctx, issuer, user, time.Now())
	return edge.SandboxStatus{State: string(st.State), Region: st.Region, Epoch: st.Epoch, Since: st.Since}, err
}
