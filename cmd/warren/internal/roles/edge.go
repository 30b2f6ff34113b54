package roles

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
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	billingcockroach "github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/regions"
	regionscockroach "github.com/warren-mesh/warren/internal/regions/cockroach"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/vault"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/remote"
)

func init() {
	register("edge", "run the edge role: WebSocket front door, auth (Vault), admission (CockroachDB), routing (Consul)", runEdge)
}

// edgeFlags are warren edge's flags.
type edgeFlags struct {
	common                  roleCommon
	prod                    prodFlags
	sched                   string
	mesh                    meshFlags
	wt                      wtFlags
	preview                 previewFlags
	publicURL, edgeID, cors string
}

// register defines every flag of warren edge on fs.
func (f *edgeFlags) register(fs *flag.FlagSet) {
	f.common.register(fs, ":7100")
	f.prod.registerVault(fs)
	f.prod.registerConsul(fs)
	f.prod.registerDB(fs)
	fs.StringVar(&f.sched, "scheduler", os.Getenv("WARREN_SCHEDULER_URL"), "this region's scheduler, http://host:port; key from $"+schedulerKeyEnv+" ($WARREN_SCHEDULER_URL)")
	f.mesh.register(fs)
	f.wt.register(fs)
	f.preview.register(fs)
	fs.StringVar(&f.publicURL, "public-url", os.Getenv("WARREN_PUBLIC_URL"), "this region's public base URL clients connect to (its load balancer), announced in GET /v1/regions; default http://<listen address> ($WARREN_PUBLIC_URL)")
	fs.StringVar(&f.edgeID, "edge-id", env.Or("NOMAD_ALLOC_ID", hostname()), "this edge's id in the region directory (default $NOMAD_ALLOC_ID or the host name)")
	fs.StringVar(&f.cors, "cors-origins", os.Getenv("WARREN_CORS_ORIGINS"), "comma-separated origins (scheme://host[:port], or * for any) whose browser pages may call GET /v1/regions and the sandbox API; default none ($WARREN_CORS_ORIGINS)")
}

// check checks the flags that need nothing opened and returns the CORS origins.
func (f *edgeFlags) check() ([]string, error) {
	corsOrigins, err := edge.ParseCORSOrigins(f.cors)
	if err != nil {
		return nil, fmt.Errorf("-cors-origins: %w", err)
	}
	if f.sched == "" {
		return nil, errors.New("-scheduler (or $WARREN_SCHEDULER_URL) is required")
	}
	if !regions.ValidRegion(f.common.region) {
		return nil, fmt.Errorf("-region %q: 1 to 32 of [a-z0-9-]", f.common.region)
	}
	return corsOrigins, nil
}

// edgeAdapters are the production adapters an edge opens: Vault (keys, mesh certificates), Consul
// (runners), CockroachDB (ledger, sessions, rate buckets, region directory, previews).
type edgeAdapters struct {
	keys   *vault.Store
	reg    *consul.Registry
	pool   *pgxpool.Pool
	ledger *billingcockroach.Ledger
}

// open opens the adapters; cl gets their closing.
func (f *edgeFlags) open(ctx context.Context, cl *closers) (edgeAdapters, error) {
	var a edgeAdapters
	var err error
	if a.keys, err = f.prod.openVault(ctx); err != nil {
		return a, err
	}
	cl.add(func() { a.keys.Close() })
	if a.reg, err = f.prod.openConsul(true); err != nil {
		return a, err
	}
	cl.add(func() { _ = a.reg.Close(context.WithoutCancel(ctx)) })
	if a.pool, a.ledger, err = f.prod.openLedger(ctx); err != nil {
		return a, err
	}
	cl.add(a.pool.Close)
	return a, nil
}

// config is the edge's configuration over a, with its region directory and its mesh node (nil without
// -mesh-listen).
func (f *edgeFlags) config(ctx context.Context, a edgeAdapters, schedKey string, wt *edge.WebTransport, corsOrigins []string, log *slog.Logger, metrics *prometheus.Registry) (edge.Config, *regionscockroach.Directory, *edgeMesh, error) {
	timer, err := billing.NewLedgerTimer(metrics)
	if err != nil {
		return edge.Config{}, nil, nil, err
	}
	dir, err := regionscockroach.New(ctx, regionscockroach.Config{Pool: a.pool})
	if err != nil {
		return edge.Config{}, nil, nil, err
	}
	pv, err := f.preview.config(ctx, a.pool, f.publicURL)
	if err != nil {
		return edge.Config{}, nil, nil, err
	}
	client := &remote.Client{URL: f.sched, Key: schedKey, Registry: a.reg}
	em, err := f.mesh.newEdgeMesh(ctx, f.common.region, a.keys, log, metrics)
	if err != nil {
		return edge.Config{}, nil, nil, err
	}
	cfg := edge.Config{
		Region: f.common.region, Verifier: token.NewVerifier(secrets.NewCache(a.keys, secrets.CacheOptions{}), token.VerifierOptions{}),
		Sandboxes: remoteSandboxes{client}, Ledger: timer.Ledger(a.ledger), Quotas: a.ledger, Issuers: a.ledger, Sessions: a.ledger.Sessions(),
		RateBuckets: a.ledger.RateBuckets(), Directory: dir, Logger: log, Metrics: metrics, WebTransport: wt, Previews: pv,
	}
	if len(corsOrigins) > 0 {
		cfg.CORS = &edge.CORS{Origins: corsOrigins}
	}
	if em != nil {
		cfg.Mesh = em.node
	}
	return cfg, dir, em, nil
}

func runEdge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren edge [flags]\n\nRuns the edge role: authenticates end users and proxies them to their sandboxes.")
	var f edgeFlags
	f.register(fs)
	log, err := f.common.parse(fs, args, stderr, "edge")
	if err != nil {
		return err
	}
	corsOrigins, err := f.check()
	if err != nil {
		return err
	}
	var cl closers
	defer cl.close()
	ln, wt, wtConn, self, err := f.bind(log, &cl)
	if err != nil {
		return err
	}
	key, err := schedulerKey()
	if err != nil {
		return err
	}
	a, err := f.open(ctx, &cl)
	if err != nil {
		return err
	}
	metrics := newRoleMetrics()
	cfg, dir, em, err := f.config(ctx, a, key, wt, corsOrigins, log, metrics)
	if err != nil {
		return err
	}
	ed, err := edge.New(cfg)
	if err != nil {
		return err
	}
	if err := f.serveSides(ctx, ed, wt, wtConn, em, &self, log, &cl); err != nil {
		return err
	}
	announce(ctx, dir, self, log, &cl)
	// After the HTTP server's shutdown (which does not track WebSockets), before the WebTransport server
	// and the mesh close: every agent channel gets an error message and a 1001 close.
	cl.add(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := ed.Shutdown(sctx); err != nil {
			log.Warn("edge shutdown", "err", err)
		}
	})
	return serveRoleOn(ctx, "edge", ln, f.common.metricsListen, ed.Handler(), metrics, stdout, log)
}

// bind listens first (the announced default URL names the port actually bound: -listen may say :0) and
// opens the WebTransport listener; self is this edge as the region directory will show it.
func (f *edgeFlags) bind(log *slog.Logger, cl *closers) (net.Listener, *edge.WebTransport, net.PacketConn, regions.Edge, error) {
	ln, err := net.Listen("tcp", f.common.listen)
	if err != nil {
		return nil, nil, nil, regions.Edge{}, fmt.Errorf("edge: listen: %w", err)
	}
	cl.add(func() { ln.Close() })
	if f.publicURL == "" {
		f.publicURL = "http://" + reachableAddr(ln.Addr().String())
	}
	wt, wtConn, err := f.wt.open(ln, log)
	if err != nil {
		return nil, nil, nil, regions.Edge{}, err
	}
	self := regions.Edge{Region: f.common.region, ID: f.edgeID, URL: f.publicURL}
	if wt != nil {
		cl.add(func() { wtConn.Close() })
		self.WebTransport = wt.URL
	}
	if err := self.Validate(); err != nil {
		return nil, nil, nil, regions.Edge{}, fmt.Errorf("-public-url, -wt-url or -edge-id: %w", err)
	}
	return ln, wt, wtConn, self, nil
}

// serveSides serves the edge's other listeners: WebTransport (when on) and the mesh (when on, its bound
// address put in self). Both close after the HTTP server has drained: cl runs after serveRoleOn returns.
func (f *edgeFlags) serveSides(ctx context.Context, ed *edge.Edge, wt *edge.WebTransport, wtConn net.PacketConn, em *edgeMesh, self *regions.Edge, log *slog.Logger, cl *closers) error {
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
		cl.add(func() { wts.Close() })
		log.Info("webtransport listening", "addr", wtConn.LocalAddr().String(), "url", wt.URL)
	}
	if em == nil {
		return nil
	}
	// Forwarded streams end with their connections.
	cl.add(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = em.node.Close(cctx)
	})
	bound, err := em.serve(ctx, ed, f.mesh.listen)
	if err != nil {
		return err
	}
	if self.Mesh, err = f.mesh.announced(bound, hostname()); err != nil {
		return err
	}
	if err := self.Validate(); err != nil {
		return fmt.Errorf("-mesh-addr: %w", err)
	}
	return nil
}

// announce keeps self in the region directory until cl runs, which withdraws it.
func announce(ctx context.Context, dir regions.Directory, self regions.Edge, log *slog.Logger, cl *closers) {
	annCtx, stopAnn := context.WithCancel(ctx)
	announced := make(chan error, 1)
	go func() { announced <- (&regions.Announcer{Dir: dir, Edge: self, Logger: log}).Run(annCtx) }()
	cl.add(func() { stopAnn(); <-announced })
}

// remoteSandboxes adapts the scheduler client to the edge's consumer interface.
type remoteSandboxes struct{ c *remote.Client }

func (a remoteSandboxes) Ensure(ctx context.Context, r edge.SandboxRequest) (registry.Entry, error) {
	return a.c.Ensure(ctx, scheduler.Request{Issuer: r.Issuer, User: r.User, Account: r.Account, ComputeLimit: r.ComputeLimit, Anchor: r.Anchor, Template: r.Template})
}

func (a remoteSandboxes) Forget(ctx context.Context, e registry.Entry) { a.c.Forget(ctx, e) }

// SandboxStatus is edge.StatusReader: the scheduler's POST /v1/sandboxes/status.
func (a remoteSandboxes) SandboxStatus(ctx context.Context, issuer, user string) (edge.SandboxStatus, error) {
	st, err := a.c.Status(ctx, issuer, user)
	return edge.SandboxStatus{State: string(st.State), Region: st.Region, Epoch: st.Epoch, Since: st.Since}, err
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
