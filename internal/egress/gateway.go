package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// ErrConfig is a Config the gateway cannot start with.
var ErrConfig = errors.New("egress gateway config")

// Dialer opens a connection to address (host:port of an address, never a name) on network ("tcp",
// "udp"), from where the gateway's traffic leaves: the runner's host. Called concurrently.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// Config is one sandbox's gateway. The caller opens the sockets (in the namespace they belong to) and the
// gateway serves them; Close closes them.
type Config struct {
	Sandbox, User string
	// Stack is the policy in force at start; SetStack changes it live.
	Stack *Stack
	// Proxy are the listeners the sandbox's TCP connections are redirected to (nftables redirect: one per
	// address family, SO_ORIGINAL_DST names the destination).
	Proxy []*net.TCPListener
	// DNS is where the sandbox's DNS queries arrive: a UDP socket, and a TCP listener (nil: no TCP).
	DNS    net.PacketConn
	DNSTCP net.Listener
	// Upstream is the resolver the gateway asks (the host's).
	Upstream netip.AddrPort
	// Dial opens the gateway's connections (nil: a net.Dialer in the caller's namespace).
	Dial Dialer

	// Inject are the credentials put into the sandbox's requests; CA (required with Inject) signs the
	// certificates of their hosts, and UpstreamRoots verify those hosts (nil: the system's roots).
	Inject        []Injection
	CA            *CA
	UpstreamRoots *x509.CertPool

	Meter   Meter        // nil: bytes are not metered (only recorded)
	Sink    Sink         // nil: records are only counted
	Metrics *Metrics     // nil: not counted
	Logger  *slog.Logger // nil: discarded
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	// Bounds; zero takes the default.
	QueryRate   float64       // DNS queries a second (default 20), with
	QueryBurst  int           // a burst of (default 100)
	MaxName     int           // bytes of a queried name (default 128)
	MaxNames    int           // (address, name) pairs remembered (default 4096)
	MaxConns    int           // TCP connections at once (default 512)
	PeekTimeout time.Duration // wait for the client's first bytes before judging by address (default 1s)
	DialTimeout time.Duration // default 10s
}

func (c *Config) defaults() error {
	switch {
	case c.Stack == nil:
		return fmt.Errorf("%w: no policy", ErrConfig)
	case len(c.Proxy) == 0 && c.DNS == nil:
		return fmt.Errorf("%w: nothing to serve", ErrConfig)
	case c.DNS != nil && !c.Upstream.IsValid():
		return fmt.Errorf("%w: no upstream resolver", ErrConfig)
	case len(c.Inject) > 0 && c.CA == nil:
		return fmt.Errorf("%w: injections without a CA", ErrConfig)
	}
	c.Inject = slices.Clone(c.Inject)
	for i := range c.Inject {
		c.Inject[i].Hosts = slices.Clone(c.Inject[i].Hosts)
		if err := c.Inject[i].validate(); err != nil {
			return err
		}
	}
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&c.QueryBurst, 100)
	set(&c.MaxName, 128)
	set(&c.MaxNames, 4096)
	set(&c.MaxConns, 512)
	if c.QueryRate <= 0 {
		c.QueryRate = 20
	}
	if c.PeekTimeout <= 0 {
		c.PeekTimeout = time.Second
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	return nil
}

// Gateway is one sandbox's egress gateway: its resolver and its TCP proxy.
type Gateway struct {
	cfg   Config
	stack atomic.Pointer[Stack]
	names *names
	dnsRL *rate.Limiter
	// rateAudit bounds the records of queries refused for rate to one a second (all are counted).
	rateAudit *rate.Limiter

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{} // guarded by mu: the connections open, both sides
	closed bool                  // guarded by mu
	active atomic.Int64
	dns    *dnsServer
}

// New starts serving cfg's sockets. Close stops.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	g := newGateway(cfg)
	for _, ln := range cfg.Proxy {
		g.wg.Go(func() { g.serveProxy(ln) })
	}
	if cfg.DNS != nil {
		g.dns = g.startDNS()
	}
	return g, nil
}

// newGateway is a gateway of cfg (defaults applied) that serves nothing yet.
func newGateway(cfg Config) *Gateway {
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{
		cfg:       cfg,
		names:     newNames(cfg.MaxNames),
		dnsRL:     rate.NewLimiter(rate.Limit(cfg.QueryRate), cfg.QueryBurst),
		rateAudit: rate.NewLimiter(1, 1),
		ctx:       ctx,
		cancel:    cancel,
		conns:     make(map[net.Conn]struct{}),
	}
	g.stack.Store(cfg.Stack)
	return g
}

// SetStack changes the policy in force: new queries and connections are judged by it at once.
// Connections already open are not cut.
func (g *Gateway) SetStack(s *Stack) { g.stack.Store(s) }

// Stack is the policy in force.
func (g *Gateway) Stack() *Stack { return g.stack.Load() }

// Close stops serving, closes the sockets and every open connection, and waits for the gateway's
// goroutines. It is idempotent.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.cancel()
	for _, ln := range g.cfg.Proxy {
		ln.Close()
	}
	if g.dns != nil {
		g.dns.shutdown(ctx)
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close egress gateway %s: %w", g.cfg.Sandbox, ctx.Err())
	}
}

// track registers an open connection so Close can end it; false when the gateway is closed.
func (g *Gateway) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// record stamps r and hands it to the sink and the counters.
func (g *Gateway) record(r Record) {
	r.Sandbox, r.User = g.cfg.Sandbox, g.cfg.User
	if r.Time.IsZero() {
		r.Time = g.cfg.Now()
	}
	g.cfg.Metrics.count(r)
	if g.cfg.Sink != nil {
		g.cfg.Sink.Record(r)
	}
}
