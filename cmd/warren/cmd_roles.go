package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/spool"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/regions"
	regionscockroach "github.com/warren-mesh/warren/internal/regions/cockroach"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/scheduler"
	schedcockroach "github.com/warren-mesh/warren/scheduler/cockroach"
	"github.com/warren-mesh/warren/scheduler/nomad"
	"github.com/warren-mesh/warren/scheduler/remote"
	"github.com/warren-mesh/warren/scheduler/runnerlease"
)

// The production roles (docs/ARCHITECTURE.md#roles): each runs as its own process over the production adapters —
// Vault (secrets), Consul (registry), CockroachDB (placements, ledger), Nomad (sandboxes), S3 (snapshots,
// through the runners). `warren dev` runs all of them in one process with the embedded adapters instead.
func init() {
	register("edge", "run the edge role: WebSocket front door, auth (Vault), admission (CockroachDB), routing (Consul)", runEdge)
	register("scheduler", "run the scheduler role: placements (CockroachDB), sandboxes on Nomad, runners found through Consul", runScheduler)
	register("billing", "run the billing role: the admin API (issuers, quotas, prices, usage) over CockroachDB and Vault", runBilling)
}

// schedulerKeyEnv is the shared key between edges and schedulers (the scheduler API hands out runner keys).
const schedulerKeyEnv = "WARREN_SCHEDULER_KEY"

// roleCommon are the flags every role has.
type roleCommon struct {
	listen, metricsListen, region, logLevel string
}

// parse parses args and returns the role's logger, tagged with role and region.
func (c *roleCommon) parse(fs *flag.FlagSet, args []string, stderr io.Writer, role string) (*slog.Logger, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	log, err := newLogger(stderr, c.logLevel)
	if err != nil {
		return nil, err
	}
	return log.With("role", role, "region", c.region), nil
}

func (c *roleCommon) register(fs *flag.FlagSet, defListen string) {
	fs.StringVar(&c.listen, "listen", envOr("WARREN_LISTEN", defListen), "listen address ($WARREN_LISTEN)")
	fs.StringVar(&c.metricsListen, "metrics-listen", envOr("WARREN_METRICS_LISTEN", ""), metricsListenUsage)
	fs.StringVar(&c.region, "region", envOr("WARREN_REGION", "global"), "this region's name ($WARREN_REGION)")
	fs.StringVar(&c.logLevel, "log-level", envOr("WARREN_LOG_LEVEL", "info"), "debug, info, warn or error ($WARREN_LOG_LEVEL)")
}

// serveRole serves h on listen until ctx ends, then drains for up to 10 s; the registry's metrics go to the
// separate listener c.metricsListen (none when empty), never to the role's own. It prints one JSON line
// {"event":"ready","addr":…,"metrics":…} on stdout once listening, so tests and supervisors know the ports.
func serveRole(ctx context.Context, role string, c roleCommon, h http.Handler, reg *prometheus.Registry, stdout io.Writer, log *slog.Logger) error {
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("%s: listen: %w", role, err)
	}
	return serveRoleOn(ctx, role, ln, c.metricsListen, h, reg, stdout, log)
}

// serveRoleOn is serveRole on a listener already bound.
func serveRoleOn(ctx context.Context, role string, ln net.Listener, metricsListen string, h http.Handler, reg *prometheus.Registry, stdout io.Writer, log *slog.Logger) error {
	mctx, stopMetrics := context.WithCancel(ctx)
	defer stopMetrics()
	metricsAddr, metricsDone, err := serveMetrics(mctx, metricsListen, reg, log)
	if err != nil {
		ln.Close()
		return fmt.Errorf("%s: %w", role, err)
	}
	defer func() { stopMetrics(); metricsDone() }()
	srv := httpx.NewServer(h, httpx.Config{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String())
	fmt.Fprintf(stdout, "{\"event\":\"ready\",\"role\":%q,\"addr\":%q,\"metrics\":%q}\n", role, ln.Addr().String(), metricsAddr)
	select {
	case err := <-served:
		return fmt.Errorf("%s: serve: %w", role, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}

func newRoleMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func schedulerKey() (string, error) {
	k := os.Getenv(schedulerKeyEnv)
	_ = os.Unsetenv(schedulerKeyEnv)
	if err := remote.CheckKey(k); err != nil {
		return "", fmt.Errorf("$%s: %w", schedulerKeyEnv, err)
	}
	return k, nil
}

func runEdge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c     roleCommon
		p     prodFlags
		sched string
	)
	c.register(fs, ":7100")
	p.registerVault(fs)
	p.registerConsul(fs)
	p.registerDB(fs)
	fs.StringVar(&sched, "scheduler", os.Getenv("WARREN_SCHEDULER_URL"), "this region's scheduler, http://host:port; key from $"+schedulerKeyEnv+" ($WARREN_SCHEDULER_URL)")
	var mf meshFlags
	mf.register(fs)
	var wf wtFlags
	wf.register(fs)
	var pf previewFlags
	pf.register(fs)
	var publicURL, edgeID string
	fs.StringVar(&publicURL, "public-url", os.Getenv("WARREN_PUBLIC_URL"), "this region's public base URL clients connect to (its load balancer), announced in GET /v1/regions; default http://<listen address> ($WARREN_PUBLIC_URL)")
	fs.StringVar(&edgeID, "edge-id", envOr("NOMAD_ALLOC_ID", hostname()), "this edge's id in the region directory (default $NOMAD_ALLOC_ID or the host name)")
	corsFlag := fs.String("cors-origins", os.Getenv("WARREN_CORS_ORIGINS"), "comma-separated origins (scheme://host[:port], or * for any) whose browser pages may call GET /v1/regions and the sandbox API; default none ($WARREN_CORS_ORIGINS)")
	log, err := c.parse(fs, args, stderr, "edge")
	if err != nil {
		return err
	}
	corsOrigins, err := edge.ParseCORSOrigins(*corsFlag)
	if err != nil {
		return fmt.Errorf("-cors-origins: %w", err)
	}
	if sched == "" {
		return errors.New("-scheduler (or $WARREN_SCHEDULER_URL) is required")
	}
	if !regions.ValidRegion(c.region) {
		return fmt.Errorf("-region %q: 1 to 32 of [a-z0-9-]", c.region)
	}
	// Listen first: the announced default URL names the port actually bound (-listen may say :0).
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("edge: listen: %w", err)
	}
	defer ln.Close()
	if publicURL == "" {
		publicURL = "http://" + reachableAddr(ln.Addr().String())
	}
	wt, wtConn, err := wf.open(ln, log)
	if err != nil {
		return err
	}
	self := regions.Edge{Region: c.region, ID: edgeID, URL: publicURL}
	if wt != nil {
		defer wtConn.Close()
		self.WebTransport = wt.URL
	}
	if err := self.Validate(); err != nil {
		return fmt.Errorf("-public-url, -wt-url or -edge-id: %w", err)
	}
	key, err := schedulerKey()
	if err != nil {
		return err
	}
	keys, err := p.openVault(ctx)
	if err != nil {
		return err
	}
	defer keys.Close()
	reg, err := p.openConsul(true)
	if err != nil {
		return err
	}
	defer reg.Close(context.WithoutCancel(ctx))
	pool, ledger, err := p.openLedger(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	sessions, buckets := ledger.Sessions(), ledger.RateBuckets()
	metrics := newRoleMetrics()
	timer, err := billing.NewLedgerTimer(metrics)
	if err != nil {
		return err
	}
	dir, err := regionscockroach.New(ctx, regionscockroach.Config{Pool: pool})
	if err != nil {
		return err
	}
	pv, err := pf.config(ctx, pool, publicURL)
	if err != nil {
		return err
	}
	client := &remote.Client{URL: sched, Key: key, Registry: reg}
	em, err := mf.newEdgeMesh(ctx, c.region, keys, log, metrics)
	if err != nil {
		return err
	}
	cfg := edge.Config{
		Region: c.region, Verifier: token.NewVerifier(secrets.NewCache(keys, secrets.CacheOptions{}), token.VerifierOptions{}),
		Sandboxes: remoteSandboxes{client}, Ledger: timer.Ledger(ledger), Quotas: ledger, Sessions: sessions, RateBuckets: buckets,
		Directory: dir, Logger: log, Metrics: metrics, WebTransport: wt, Previews: pv,
	}
	if len(corsOrigins) > 0 {
		cfg.CORS = &edge.CORS{Origins: corsOrigins}
	}
	if em != nil {
		cfg.Mesh = em.node
	}
	ed, err := edge.New(cfg)
	if err != nil {
		return err
	}
	if wt != nil {
		wts, err := ed.WebTransportServer()
		if err != nil {
			return err
		}
		go func() {
			if err := wts.Serve(wtConn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("webtransport listener failed", "err", err)
			}
		}()
		defer wts.Close() // after the HTTP server has drained (deferred before serveRoleOn returns)
		log.Info("webtransport listening", "addr", wtConn.LocalAddr().String(), "url", wt.URL)
	}
	if em != nil {
		// Closed after the HTTP server has drained (deferred before serveRole returns): forwarded streams end
		// with their connections.
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = em.node.Close(cctx)
		}()
		bound, err := em.serve(ctx, ed, mf.listen)
		if err != nil {
			return err
		}
		if self.Mesh, err = mf.announced(bound, hostname()); err != nil {
			return err
		}
		if err := self.Validate(); err != nil {
			return fmt.Errorf("-mesh-addr: %w", err)
		}
	}
	annCtx, stopAnn := context.WithCancel(ctx)
	announced := make(chan error, 1)
	go func() { announced <- (&regions.Announcer{Dir: dir, Edge: self, Logger: log}).Run(annCtx) }()
	defer func() { stopAnn(); <-announced }() // withdraws this edge from the directory
	// After the HTTP server's shutdown (which does not track WebSockets), before the WebTransport server
	// and the mesh close: every agent channel gets an error message and a 1001 close.
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := ed.Shutdown(sctx); err != nil {
			log.Warn("edge shutdown", "err", err)
		}
	}()
	return serveRoleOn(ctx, "edge", ln, c.metricsListen, ed.Handler(), metrics, stdout, log)
}

// remoteSandboxes adapts the scheduler client to the edge's consumer interface.
type remoteSandboxes struct{ c *remote.Client }

func (a remoteSandboxes) Ensure(ctx context.Context, r edge.SandboxRequest) (registry.Entry, error) {
	return a.c.Ensure(ctx, scheduler.Request{Issuer: r.Issuer, User: r.User, Account: r.Account, ComputeLimit: r.ComputeLimit, Anchor: r.Anchor, Template: r.Template})
}

func (a remoteSandboxes) Forget(ctx context.Context, e registry.Entry) { a.c.Forget(ctx, e) }

func runScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c                           roleCommon
		p                           prodFlags
		nomadAddr, binary, drv, dcs string
		cpu, mem, warmPool          int
		startTimeout, killTimeout   time.Duration
		leaseTTL                    time.Duration
		runnerArgs                  multiFlag
		runnerEnv                   multiFlag
	)
	c.register(fs, ":7300")
	p.registerConsul(fs)
	p.registerDB(fs)
	fs.StringVar(&nomadAddr, "nomad", firstEnv("WARREN_NOMAD_ADDR", "NOMAD_ADDR"), "Nomad HTTP address; token from $NOMAD_TOKEN ($WARREN_NOMAD_ADDR, $NOMAD_ADDR)")
	fs.StringVar(&dcs, "datacenter", envOr("WARREN_DATACENTER", "dc1"), "Nomad datacenter of sandboxes ($WARREN_DATACENTER)")
	fs.StringVar(&binary, "runner-binary", envOr("WARREN_RUNNER_BINARY", "/usr/local/bin/warren"), "path of warren on the Nomad clients ($WARREN_RUNNER_BINARY)")
	fs.StringVar(&drv, "nomad-driver", envOr("WARREN_NOMAD_DRIVER", "exec"), "task driver of sandboxes: exec (production) or raw_exec (tests)")
	fs.IntVar(&warmPool, "warm-pool", 0, "warm runners to keep started ahead of demand (claimed in milliseconds, refilled in the background)")
	fs.IntVar(&cpu, "runner-cpu", 500, "CPU of a sandbox, MHz")
	fs.IntVar(&mem, "runner-memory", 1024, "memory of a sandbox, MiB")
	fs.DurationVar(&startTimeout, "start-timeout", 60*time.Second, "how long a sandbox may take to become ready")
	fs.DurationVar(&killTimeout, "kill-timeout", 45*time.Second, "grace between SIGTERM and SIGKILL of a sandbox (covers its final snapshot)")
	fs.DurationVar(&leaseTTL, "lease-ttl", 30*time.Second, "how long a user stays held by this region without a renewal; a runner not told of a renewal stops before its lease ends (a scheduler restart must adopt its runners within it)")
	var templatePath, spoolPath string
	fs.StringVar(&spoolPath, "spool", envOr("WARREN_SCHEDULER_SPOOL", "scheduler-usage.spool"), "file where compute usage waits while CockroachDB is unreachable, replayed when it is back; keep it on a disk that outlives a restart ($WARREN_SCHEDULER_SPOOL)")
	fs.StringVar(&templatePath, "sandbox-template", os.Getenv("WARREN_SANDBOX_TEMPLATE"), "sandbox job template (HCL2 with the variables of jobs/sandbox.nomad.hcl); default: the built-in one. Use your own to add Vault templates for the runners' secrets (model key, database URL, S3 keys) instead of -runner-env")
	fs.Var(&runnerArgs, "runner-arg", "extra flag for every runner (repeatable), e.g. -runner-arg=-idle-timeout=10m")
	fs.Var(&runnerEnv, "runner-env", "K=V in every runner's environment (repeatable; prefer Vault templates for secrets)")
	runnerWebhook := fs.String("runner-webhook-secret", "", "Vault KV v2 path of the operator's task webhook secret (key secret) each sandbox job renders for its runner's -webhook-secret-file (the template's webhook_secret_path); unset: task webhooks are refused")
	runnerVaultRole := fs.String("runner-vault-role", "", "with -runner-webhook-secret: the Vault role the sandbox jobs log in with (default: the template's, warren-runner)")
	log, err := c.parse(fs, args, stderr, "scheduler")
	if err != nil {
		return err
	}
	key, err := schedulerKey()
	if err != nil {
		return err
	}
	reg, err := p.openConsul(false)
	if err != nil {
		return err
	}
	defer reg.Close(context.WithoutCancel(ctx))
	pool, ledger, err := p.openLedger(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	placements, err := schedcockroach.New(ctx, schedcockroach.Config{Pool: pool})
	if err != nil {
		return err
	}
	ncfg := api.DefaultConfig()
	if nomadAddr != "" {
		ncfg.Address = nomadAddr
	}
	nc, err := api.NewClient(ncfg)
	if err != nil {
		return fmt.Errorf("nomad client: %w", err)
	}
	var template []byte
	if templatePath != "" {
		if template, err = os.ReadFile(templatePath); err != nil {
			return fmt.Errorf("-sandbox-template: %w", err)
		}
	}
	env, err := runnerEnv.pairs()
	if err != nil {
		return fmt.Errorf("-runner-env: %w", err)
	}
	metrics := newRoleMetrics()
	// Runners register themselves in Consul; they find it at the scheduler's address.
	args2 := append([]string{"-consul", p.consulAddr}, runnerArgs...)
	driver, err := nomad.New(nomad.Config{
		Client: nc, Registry: reg, Template: template, Datacenters: []string{dcs}, Binary: binary, Driver: drv,
		RunnerArgs: args2, Env: env, CPU: cpu, MemoryMB: mem, KillTimeout: killTimeout,
		WebhookSecretPath: *runnerWebhook, VaultRole: *runnerVaultRole,
		Logger: log.With("component", "nomad"), Metrics: metrics,
		Pool: nomad.PoolConfig{Size: warmPool, Region: c.region, Registry: reg},
	})
	if err != nil {
		return err
	}
	defer driver.Close()
	// Compute usage the ledger cannot take now waits in the spool and is replayed (docs/ARCHITECTURE.md#spool).
	sp, err := spool.Open(spoolPath, ledger, spool.Options{Logger: log.With("component", "spool"), Metrics: metrics})
	if err != nil {
		return fmt.Errorf("usage spool: %w", err)
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sp.Flush(fctx) // what stays is replayed by the next scheduler that opens the file
		_ = sp.Close()
	}()
	s, err := scheduler.New(scheduler.Config{
		Region: c.region, Placements: placements, Registry: reg, Driver: driver, Ledger: sp, RunnerRegisters: true,
		StartTimeout: startTimeout, LeaseTTL: leaseTTL, Leases: &runnerlease.Client{}, Logger: log, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	defer func() {
		// The runners keep serving: closing records their compute buckets that are over, bounded.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), schedulerCloseTimeout)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			log.Warn("close the scheduler", "err", err)
		}
	}()
	adoptCtx, stopAdopting := context.WithCancel(ctx)
	var adopting sync.WaitGroup
	adopting.Go(func() { adoptRunners(adoptCtx, s, log) })
	defer adopting.Wait() // before s.Close and the stores' closing
	defer stopAdopting()
	return serveRole(ctx, "scheduler", c, remote.Handler(s, key, log), metrics, stdout, log)
}

// schedulerCloseTimeout bounds the scheduler role's Scheduler.Close: recording the supervised runners'
// last compute buckets (each write bounded by 5 s) before the process exits.
const schedulerCloseTimeout = time.Minute

// adoptRunners takes over the region's runners that a previous scheduler process left serving (so their
// compute is metered again and their placements sleep when they exit), retrying with backoff (5 s doubling
// to 5 min) while the registry, the placements or Nomad cannot be reached, until it succeeds or ctx ends.
func adoptRunners(ctx context.Context, s *scheduler.Scheduler, log *slog.Logger) {
	wait := 5 * time.Second
	for {
		n, err := s.Adopt(ctx)
		if err == nil {
			log.Info("runners of the previous scheduler adopted", "count", n)
			return
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("adopt the previous scheduler's runners; retrying", "adopted", n, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Minute)
	}
}

func runBilling(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("billing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c roleCommon
		p prodFlags
	)
	c.register(fs, ":7200")
	p.registerVault(fs)
	p.registerDB(fs)
	p.registerS3(fs) // the workspace templates' store (warren deploy); none: no templates API
	webhookSecretFile := fs.String("webhook-secret-file", "", "the runners' -webhook-secret-file: GET /v1/issuers/{iss}/webhook-secret answers each issuer's webhook secret derived from it; unset: that route answers unavailable")
	log, err := c.parse(fs, args, stderr, "billing")
	if err != nil {
		return err
	}
	var webhookMaster []byte
	if *webhookSecretFile != "" {
		if webhookMaster, err = runner.ReadWebhookMaster(*webhookSecretFile); err != nil {
			return err
		}
	}
	keys, err := p.openVault(ctx)
	if err != nil {
		return err
	}
	defer keys.Close()
	pool, ledger, err := p.openLedger(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	metrics := newRoleMetrics()
	a, err := billing.NewAPI(billing.APIConfig{Store: ledger, Keys: keys, AdminKeys: keys.AdminKeys, Logger: log, Metrics: metrics,
		WebhookMaster: webhookMaster})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	a.Mount(mux)
	mux.Handle("/", a) // any other path: the API's own unauthenticated or not_found, never Go's plain 404
	if err := mountTemplates(ctx, mux, a, &p, metrics, log); err != nil {
		return err
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return serveRole(ctx, "billing", c, mux, metrics, stdout, log)
}

// hostname is the host's name, or "edge" when it cannot be read.
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "edge"
}

// reachableAddr is listen with a host others can use: the host name when it names none or an unspecified
// address (":7100", "0.0.0.0:7100").
func reachableAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip, perr := netip.ParseAddr(host); host == "" || (perr == nil && ip.IsUnspecified()) {
		host = hostname()
	}
	return net.JoinHostPort(host, port)
}
