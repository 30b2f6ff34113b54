// Package consul is the Registry port on Consul (docs/ARCHITECTURE.md#owner-lock): each user's owner is a KV
// key locked by a Consul session, so at most one runner holds it and a runner that stops renewing loses it.
//
// Layout, under a configurable prefix (default "warren/"):
//
//	<prefix>owners/<registry.SandboxID(issuer, user)>  →  JSON entry {issuer, user, epoch, region, alloc, addr, key, since}
//
// The key name is a hash so that user-controlled strings never reach a KV path. The value holds the
// runner's bearer key: it lives only in Consul's (ACL-protected) KV store and is never logged or put into
// an error.
//
// Ownership. A runner calls Hold: it registers its service instance ("warren-runner-<alloc>") with a TTL
// check that the Lease keeps passing, creates a session bound to serfHealth and that check, and acquires
// its owner key with the session. Register is Hold without the service, for a process registering runners
// it supervises (warren dev, tests); the Registry renews those sessions until Deregister or Close. A holder
// of a lower epoch is fenced: its session is destroyed (its Lease.Lost fires) and the key acquired once the
// lock delay has passed. A holder of a higher epoch, or of the same epoch with another alloc, wins: the
// newcomer gets registry.ErrStale and leaves nothing behind.
//
// Sessions use the "release" behaviour, not "delete": when a session ends without Release (crash, expiry,
// fencing) the key stays with no holder, which Lookup reports as registry.ErrNotFound, and keeps two
// things: its LockIndex, which therefore grows with every new owner and can fence writes alongside the
// epoch (with "delete" it would restart at 1 after every takeover), and the last epoch, so that a runner of
// an older epoch cannot take the key back after it expired. Release and Deregister delete the key.
//
// Edges set Config.Watch: Lookup is then served from a cache fed by one blocking query on the owners
// prefix, with a direct read on a miss, and Invalidate drops an entry after a failed dial. While Consul is
// unreachable a watched Registry keeps serving what it last saw; a direct read returns an error wrapping
// registry.ErrUnavailable.
package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/warren-mesh/warren/internal/registry"
)

// Config configures a Registry. The zero value of every field means its default.
type Config struct {
	Addr       string        // Consul HTTP address, host:port (default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500, via api.DefaultConfig)
	Token      string        // ACL token (default: CONSUL_HTTP_TOKEN via api.DefaultConfig)
	Datacenter string        // default: the agent's
	Prefix     string        // KV prefix, default "warren/"
	Service    string        // service name runners register as, default "warren-runner"
	SessionTTL time.Duration // default 10s (Consul's minimum unless the agent's session_ttl_min is lower); the lease a runner must renew
	LockDelay  time.Duration // default 1s (Consul's default 15s would delay every takeover after a crash)
	Watch      bool          // edges: serve Lookup from a cache fed by one blocking query on the owners prefix
	Logger     *slog.Logger  // default: discard
}

const (
	defaultPrefix     = "warren/"
	defaultService    = "warren-runner"
	defaultSessionTTL = 10 * time.Second
	defaultLockDelay  = time.Second

	// requestTimeout bounds every request that is not a blocking query, so that a hung Consul gives
	// registry.ErrUnavailable instead of blocking the caller.
	requestTimeout = 5 * time.Second
	// dialTimeout bounds connecting to the agent.
	dialTimeout = 2 * time.Second
	// watchWait is how long a blocking query waits for a change before returning unchanged.
	watchWait = time.Minute
	// acquireTimeout bounds Register and Hold when the caller's context has no deadline (lock delays of
	// successive takeovers add up; a lock that cannot be had in this time is reported, not waited for).
	acquireTimeout = time.Minute
)

// Registry is a registry.Registry on Consul, also holding leases for runners (Hold) and, with
// Config.Watch, caching lookups for edges. Safe for concurrent use.
type Registry struct {
	client *api.Client
	cfg    Config
	log    *slog.Logger
	owners string // <prefix>owners/

	ctx    context.Context // ends at Close; parent of every background goroutine
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	leases map[string]*Lease // by session: every lease not yet released, what Close releases
	owned  map[string]*Lease // by sandbox id: the newest lease Register took
	cache  *cache            // nil without Watch
}

var _ registry.Registry = (*Registry)(nil)

// New returns a Registry talking to the Consul agent at cfg.Addr. It does not contact Consul: an
// unreachable agent shows as registry.ErrUnavailable from the calls (and, with Watch, the cache fills once
// the agent answers).
func New(cfg Config) (*Registry, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if strings.HasPrefix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("consul registry: prefix %q must not start with /", cfg.Prefix)
	}
	if cfg.Service == "" {
		cfg.Service = defaultService
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = defaultSessionTTL
	}
	if cfg.LockDelay == 0 {
		cfg.LockDelay = defaultLockDelay
	}
	if cfg.SessionTTL < time.Second || cfg.LockDelay < 0 {
		return nil, fmt.Errorf("consul registry: session TTL %v (want at least 1s) or lock delay %v out of range",
			cfg.SessionTTL, cfg.LockDelay)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}

	ac := api.DefaultConfig()
	if cfg.Addr != "" {
		ac.Address = cfg.Addr
	}
	if cfg.Token != "" {
		ac.Token = cfg.Token
	}
	ac.Datacenter = cfg.Datacenter
	ac.Transport.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	ac.Transport.MaxIdleConnsPerHost = 64
	hc, err := api.NewHttpClient(ac.Transport, ac.TLSConfig)
	if err != nil {
		return nil, fmt.Errorf("consul registry: %w", err)
	}
	hc.Transport = serverTransport{base: hc.Transport}
	ac.HttpClient = hc
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("consul registry: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		client: client,
		cfg:    cfg,
		log:    cfg.Logger,
		owners: cfg.Prefix + "owners/",
		ctx:    ctx,
		cancel: cancel,
		leases: map[string]*Lease{},
		owned:  map[string]*Lease{},
	}
	if cfg.Watch {
		r.cache = newCache()
		r.wg.Go(func() { r.watch(ctx) })
	}
	return r, nil
}

// Close stops the watch and releases every lease still held, Register's and Hold's (a Hold lease released
// this way has its Lost closed: its holder did not release it). The releases talk to Consul, each bounded
// by ctx and by requestTimeout: once ctx ends, the leases not yet released are left for their sessions'
// TTL to end, and the error says so (it wraps ctx's). Idempotent; the Registry is unusable afterwards
// (ErrClosed).
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	leases := make([]*Lease, 0, len(r.leases))
	for _, l := range r.leases {
		leases = append(leases, l)
	}
	r.mu.Unlock()

	var errs []error
	for _, l := range leases {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		if err := l.release(ctx, true); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	r.cancel()
	r.wg.Wait()
	return errors.Join(errs...)
}

func (r *Registry) key(issuer, user string) (id, key string) {
	id = registry.SandboxID(issuer, user)
	return id, r.owners + id
}

// query and write bound one request by requestTimeout (within ctx).
func (r *Registry) query(ctx context.Context) (*api.QueryOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	return (&api.QueryOptions{}).WithContext(ctx), cancel
}

func (r *Registry) write(ctx context.Context) (*api.WriteOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	return (&api.WriteOptions{}).WithContext(ctx), cancel
}

// get reads one key.
func (r *Registry) get(ctx context.Context, key string) (*api.KVPair, *api.QueryMeta, error) {
	q, cancel := r.query(ctx)
	defer cancel()
	return r.client.KV().Get(key, q)
}

// Lookup returns the entry held under (issuer, user)'s owner key, or registry.ErrNotFound when there is
// none or no session holds it. With Watch it answers from the cache when it can.
func (r *Registry) Lookup(ctx context.Context, issuer, user string) (registry.Entry, error) {
	if r.isClosed() {
		return registry.Entry{}, ErrClosed
	}
	id, key := r.key(issuer, user)
	if r.cache != nil {
		if e, ok := r.cache.get(id); ok {
			return e, nil
		}
	}
	pair, meta, err := r.get(ctx, key)
	if err != nil {
		return registry.Entry{}, wrap(ctx, err, "look up owner %s", id)
	}
	if pair == nil || pair.Session == "" {
		return registry.Entry{}, fmt.Errorf("look up owner %s: %w", id, registry.ErrNotFound)
	}
	e, err := decodeEntry(pair.Value)
	if err != nil {
		return registry.Entry{}, fmt.Errorf("look up owner %s: %w", id, err)
	}
	if e.Issuer != issuer || e.User != user {
		return registry.Entry{}, fmt.Errorf("look up owner %s: %w: entry names another user", id, ErrBadEntry)
	}
	if r.cache != nil {
		r.cache.putIfFresh(id, e, pair, meta.LastIndex)
	}
	return e, nil
}

// Invalidate drops (issuer, user) from the watch cache, so that the next Lookup reads Consul. Edges call it
// after a failed dial. A no-op without Watch.
func (r *Registry) Invalidate(issuer, user string) {
	if r.cache != nil {
		id, _ := r.key(issuer, user)
		r.cache.drop(id)
	}
}

// Register makes e the owner of its user with a session this Registry renews until Deregister or Close: Hold
// without a service instance or check. Registering the entry this Registry already holds again (same epoch
// and alloc) rewrites its value in place. registry.ErrStale when a higher epoch (or the same epoch with
// another alloc) holds the key.
func (r *Registry) Register(ctx context.Context, e registry.Entry) error {
	id, key := r.key(e.Issuer, e.User)
	r.mu.Lock()
	cur := r.owned[id]
	r.mu.Unlock()
	if cur != nil && cur.Entry().Epoch == e.Epoch && cur.Entry().Alloc == e.Alloc && !cur.isLost() {
		ctx, cancel := r.acquireContext(ctx)
		defer cancel()
		_, modifyIndex, err := r.acquire(ctx, key, cur.session, e)
		if err == nil {
			cur.mu.Lock()
			cur.entry = e
			cur.mu.Unlock()
			if r.cache != nil {
				r.cache.put(id, cached{modify: modifyIndex, session: cur.session, e: e})
			}
			return nil
		}
		if errors.Is(err, registry.ErrStale) || !errors.Is(err, errSessionGone) {
			return err
		}
		// The session is gone (or the key was taken meanwhile): start over with a new one.
	}
	l, err := r.hold(ctx, e, false)
	if err != nil {
		return err
	}
	r.mu.Lock()
	// Under r.mu, so that a lease lost meanwhile is either seen here or forgotten by lose afterwards.
	if prev := r.owned[id]; !l.isLost() && (prev == nil || prev.Entry().Epoch <= e.Epoch) {
		r.owned[id] = l
	}
	r.mu.Unlock()
	return nil
}

// Deregister deletes (issuer, user)'s owner key if its entry has the given epoch, and ends the session
// holding it: a lease of this Registry is released (a Hold lease's Lost is closed), another process's
// session is destroyed (fencing that runner, whose Lease.Lost fires). Another epoch's entry, or none, is
// left alone and nil returned.
func (r *Registry) Deregister(ctx context.Context, issuer, user string, epoch int64) error {
	if r.isClosed() {
		return ErrClosed
	}
	id, key := r.key(issuer, user)
	for attempt := 0; ; attempt++ {
		pair, _, err := r.get(ctx, key)
		if err != nil {
			return wrap(ctx, err, "deregister %s epoch %d", id, epoch)
		}
		if pair == nil {
			return nil
		}
		cur, err := decodeEntry(pair.Value)
		if err != nil {
			r.log.Warn("registry: deregister skips a malformed owner entry", "sandbox", id, "err", err)
			return nil
		}
		if cur.Epoch != epoch {
			return nil
		}
		if l := r.leaseBySession(pair.Session); l != nil {
			// Released on someone else's behalf: to a holder in this process the lease is lost.
			return l.release(ctx, true)
		}
		res, err := r.txn(ctx, api.KVTxnOps{
			{Verb: api.KVCheckIndex, Key: key, Index: pair.ModifyIndex},
			{Verb: api.KVDelete, Key: key},
		})
		if err != nil {
			return wrap(ctx, err, "deregister %s epoch %d", id, epoch)
		}
		if !res.ok {
			if attempt < 10 {
				continue // changed since read: look again
			}
			return fmt.Errorf("deregister %s epoch %d: key keeps changing: %s", id, epoch, res.what)
		}
		if r.cache != nil {
			r.cache.drop(id)
		}
		if pair.Session != "" {
			w, cancel := r.write(ctx)
			_, err := r.client.Session().Destroy(pair.Session, w)
			cancel()
			if err != nil {
				return wrap(ctx, err, "deregister %s epoch %d: destroy session", id, epoch)
			}
		}
		return nil
	}
}

func (r *Registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

func (r *Registry) leaseBySession(session string) *Lease {
	if session == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases[session]
}

// txnResult is the outcome of a KV transaction: ok, or rolled back with what failed.
type txnResult struct {
	ok      bool
	failed  int    // index of the failed operation
	what    string // Consul's reason
	results []*api.KVPair
}

// txn runs ops atomically.
func (r *Registry) txn(ctx context.Context, ops api.KVTxnOps) (txnResult, error) {
	q, cancel := r.query(ctx)
	defer cancel()
	ok, resp, _, err := r.client.KV().Txn(ops, q)
	if err != nil {
		return txnResult{}, err
	}
	res := txnResult{ok: ok, results: resp.Results, failed: -1}
	if !ok && len(resp.Errors) > 0 {
		res.failed, res.what = resp.Errors[0].OpIndex, resp.Errors[0].What
	}
	return res, nil
}
