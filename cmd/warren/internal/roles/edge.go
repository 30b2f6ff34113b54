package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/regions"
	regionscockroach "github.com/warren-mesh/warren/internal/regions/cockroach"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/remote"
)

func init() {
	register("edge", "run the edge role: WebSocket front door, auth (Vault), admission (CockroachDB), routing (Consul)", runEdge)
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
	fs.StringVar(&edgeID, "edge-id", env.Or("NOMAD_ALLOC_ID", hostname()), "this edge's id in the region directory (default $NOMAD_ALLOC_ID or the host name)")
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
