package consul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/warren-mesh/warren/internal/registry"
)

// errSessionGone is what a renewal or an acquire reports when Consul no longer knows the session.
var errSessionGone = errors.New("session gone")

// Lease is a held owner key: a Consul session, kept alive by the Lease, holding the user's owner key (and,
// from Hold, the runner's service instance whose TTL check the session is bound to). Safe for concurrent
// use.
type Lease struct {
	r         *Registry
	id        string // sandbox id
	key       string
	session   string
	serviceID string // "" for Register's leases
	checkID   string
	lockIndex uint64

	mu    sync.Mutex
	entry registry.Entry

	lost     chan struct{}
	lostOnce sync.Once
	cancel   context.CancelFunc // stops the renew and watch goroutines
	// stopRenewing stops the renew goroutine alone: tests use it to play a runner that hangs.
	stopRenewing context.CancelFunc
	wg           sync.WaitGroup

	releaseOnce sync.Once
	releaseErr  error
}

// Hold makes the calling runner the owner of e's user (docs/ARCHITECTURE.md#owner-lock): it registers the
// service instance "<Service>-<alloc>" at e.Addr with a TTL check, creates a session bound to the node's
// serfHealth and that check, and acquires the owner key with it. The Lease renews session and check until
// Release; the runner must stop when Lost is closed. A holder of a lower epoch is fenced (its session
// destroyed) and the key taken once the lock delay has passed, retrying until ctx ends. registry.ErrStale
// when a higher epoch, or the same epoch with another alloc, holds the key; nothing is left behind then.
func (r *Registry) Hold(ctx context.Context, e registry.Entry) (*Lease, error) {
	return r.hold(ctx, e, true)
}

// Lost is closed when the lease no longer holds the owner key without having been released by its holder:
// the session was invalidated or destroyed, another session took the key, renewal failed for a whole
// session TTL (Consul unreachable), or the Registry was closed. The runner must then stop its agent and exit
// (self-fencing). Release does not close it.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// LockIndex is the owner key's LockIndex after the acquire: it grows with every new owner of the key, and
// fences durable writes together with the epoch.
func (l *Lease) LockIndex() uint64 { return l.lockIndex }

// Entry is the entry the lease holds the key with.
func (l *Lease) Entry() registry.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entry
}

// Release deletes the owner key if the lease still holds it, destroys the session and deregisters the
// service instance. Idempotent: later calls return the first call's result. If Consul is unreachable the
// key is released by the session's expiry within twice the TTL, and the service removed a minute after its
// check turned critical.
func (l *Lease) Release(ctx context.Context) error { return l.release(ctx, false) }

func (r *Registry) hold(ctx context.Context, e registry.Entry, withService bool) (*Lease, error) {
	id, key := r.key(e.Issuer, e.User)
	fail := func(err error) (*Lease, error) {
		return nil, fmt.Errorf("hold %s epoch %d: %w", id, e.Epoch, err)
	}
	if r.isClosed() {
		return fail(ErrClosed)
	}
	if err := validateEntry(e); err != nil {
		return fail(err)
	}
	ctx, cancel := r.acquireContext(ctx)
	defer cancel()
	l := &Lease{r: r, id: id, key: key, entry: e, lost: make(chan struct{})}
	// cleanup undoes what a failed hold created, even when ctx has ended.
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		defer cancel()
		if l.session != "" {
			w, c := r.write(ctx)
			if _, err := r.client.Session().Destroy(l.session, w); err != nil {
				r.log.Warn("registry: destroy session of a failed hold", "sandbox", id, "err", err)
			}
			c()
		}
		if l.serviceID != "" && !r.serviceInUse(l.serviceID) {
			q, c := r.query(ctx)
			if err := r.client.Agent().ServiceDeregisterOpts(l.serviceID, q); err != nil && !notFound(err) {
				r.log.Warn("registry: deregister service of a failed hold", "sandbox", id, "err", err)
			}
			c()
		}
	}

	// Refuse a stale entry before creating anything (acquire checks again, atomically).
	if err := r.precheck(ctx, key, e); err != nil {
		return fail(err)
	}
	if withService {
		l.serviceID = r.cfg.Service + "-" + e.Alloc
		l.checkID = "service:" + l.serviceID
		if err := r.registerService(ctx, l); err != nil {
			return fail(wrap(ctx, err, "register service"))
		}
	}
	se := &api.SessionEntry{
		Name:       "warren owner " + id,
		TTL:        r.cfg.SessionTTL.String(),
		Behavior:   api.SessionBehaviorRelease,
		LockDelay:  r.cfg.LockDelay,
		NodeChecks: []string{"serfHealth"},
	}
	if withService {
		se.ServiceChecks = []api.ServiceCheck{{ID: l.checkID}}
	}
	renewed := time.Now() // the session's TTL runs from its creation, a little after this
	w, c := r.write(ctx)
	session, _, err := r.client.Session().Create(se, w)
	c()
	if err != nil {
		cleanup()
		return fail(wrap(ctx, err, "create session"))
	}
	l.session = session
	// Renewals start now: waiting out a lock delay may take longer than the session's TTL.
	lctx := l.startRenewing(renewed)
	abort := func(err error) (*Lease, error) {
		l.cancel()
		l.wg.Wait()
		cleanup()
		return fail(err)
	}

	lockIndex, modifyIndex, err := r.acquire(ctx, key, session, e)
	if err != nil {
		return abort(err)
	}
	l.lockIndex = lockIndex

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return abort(ErrClosed)
	}
	if l.isLost() { // renewals failed for a whole TTL while the acquire went through
		r.mu.Unlock()
		return abort(fmt.Errorf("%w while acquiring", errSessionGone))
	}
	// From here on a lose (which forgets the lease under r.mu) finds it.
	r.leases[session] = l
	r.mu.Unlock()
	if r.cache != nil {
		r.cache.put(id, cached{modify: modifyIndex, session: session, e: e})
	}
	l.startWatching(lctx, modifyIndex)
	return l, nil
}

// precheck refuses e with registry.ErrStale when key's entry has a higher epoch, or the same epoch with
// another alloc.
func (r *Registry) precheck(ctx context.Context, key string, e registry.Entry) error {
	pair, _, err := r.get(ctx, key)
	if err != nil {
		return wrap(ctx, err, "read owner")
	}
	if pair == nil {
		return nil
	}
	if cur, err := decodeEntry(pair.Value); err == nil && isStale(e, cur) {
		return fmt.Errorf("%w: held by epoch %d", registry.ErrStale, cur.Epoch)
	}
	return nil
}

// isStale reports whether e must not replace cur.
func isStale(e, cur registry.Entry) bool {
	return cur.Epoch > e.Epoch || cur.Epoch == e.Epoch && cur.Alloc != e.Alloc
}

// notFound reports whether err is Consul's 404 (deregistering a service that is already gone).
func notFound(err error) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.Code == 404
}

// acquireContext bounds an acquire whose caller set no deadline.
func (r *Registry) acquireContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, acquireTimeout)
}

func (r *Registry) registerService(ctx context.Context, l *Lease) error {
	host, portStr, _ := net.SplitHostPort(l.entry.Addr) // validated
	port, _ := strconv.Atoi(portStr)
	meta := map[string]string{
		"sandbox": l.id,
		"epoch":   strconv.FormatInt(l.entry.Epoch, 10),
		"alloc":   l.entry.Alloc,
	}
	if reg := l.entry.Region; reg != "" && len(reg) <= 128 {
		meta["region"] = reg
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return r.client.Agent().ServiceRegisterOpts(&api.AgentServiceRegistration{
		ID:      l.serviceID,
		Name:    r.cfg.Service,
		Address: host,
		Port:    port,
		Meta:    meta,
		Check: &api.AgentServiceCheck{
			CheckID: l.checkID,
			Name:    "warren runner lease",
			TTL:     r.cfg.SessionTTL.String(),
			Status:  api.HealthPassing,
			// A runner that died without Release: its session is gone with the check, the instance follows.
			DeregisterCriticalServiceAfter: "1m",
		},
	}, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx))
}

// acquire makes session the holder of key with e as the value, fencing holders of lower epochs, and returns
// the key's LockIndex and ModifyIndex. Each step is a transaction conditioned on the key's state as read, so
// concurrent acquires of one key (from any process) serialize: the highest epoch ends up holding it.
func (r *Registry) acquire(ctx context.Context, key, session string, e registry.Entry) (lockIndex, modifyIndex uint64, err error) {
	id := key[len(r.owners):]
	fail := func(err error) (uint64, uint64, error) {
		return 0, 0, fmt.Errorf("acquire owner %s epoch %d: %w", id, e.Epoch, err)
	}
	value, err := encodeEntry(e)
	if err != nil {
		return fail(err)
	}
	wait := 10 * time.Millisecond
	for {
		pair, _, err := r.get(ctx, key)
		if err != nil {
			return fail(wrap(ctx, err, "read"))
		}
		var ops api.KVTxnOps
		if pair == nil {
			ops = api.KVTxnOps{{Verb: api.KVCheckNotExists, Key: key}}
		} else {
			if pair.Session != session {
				cur, derr := decodeEntry(pair.Value)
				switch {
				case derr != nil:
					r.log.Warn("registry: replacing a malformed owner entry", "sandbox", id, "err", derr)
				case isStale(e, cur):
					return fail(fmt.Errorf("%w: held by epoch %d", registry.ErrStale, cur.Epoch))
				}
				if pair.Session != "" {
					// A lower epoch (or this very runner under an older session) holds it: fence it. The key
					// is released, the lock delay starts, and the next round takes the key.
					w, cancel := r.write(ctx)
					_, err := r.client.Session().Destroy(pair.Session, w)
					cancel()
					if err != nil {
						return fail(wrap(ctx, err, "destroy the session of epoch %d", cur.Epoch))
					}
					continue
				}
			}
			ops = api.KVTxnOps{{Verb: api.KVCheckIndex, Key: key, Index: pair.ModifyIndex}}
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVLock, Key: key, Value: value, Session: session})
		res, err := r.txn(ctx, ops)
		if err != nil {
			return fail(wrap(ctx, err, "lock"))
		}
		if res.ok {
			for _, kv := range res.results {
				if kv != nil && kv.Key == key {
					lockIndex, modifyIndex = kv.LockIndex, kv.ModifyIndex
				}
			}
			return lockIndex, modifyIndex, nil
		}
		if res.failed == 0 {
			continue // the key changed since it was read: look again
		}
		switch {
		case sessionInvalid(res.what):
			return fail(fmt.Errorf("%w: %s", errSessionGone, res.what))
		case !lockDelayed(res.what) && !containsFold(res.what, "already held"):
			return fail(fmt.Errorf("lock refused: %s", res.what))
		}
		// The lock delay of a fenced or expired holder (or a holder that came in between): wait, look again.
		if err := sleep(ctx, wait); err != nil {
			return fail(fmt.Errorf("%w while waiting out the lock delay", err))
		}
		wait = min(wait*2, max(r.cfg.LockDelay/4, 10*time.Millisecond), 250*time.Millisecond)
	}
}

// startRenewing runs the lease's renew goroutine, from the session's creation on, and returns the context
// of the lease's goroutines (ended by l.cancel).
func (l *Lease) startRenewing(renewed time.Time) context.Context {
	ctx, cancel := context.WithCancel(l.r.ctx)
	l.cancel = cancel
	renewCtx, stopRenewing := context.WithCancel(ctx)
	l.stopRenewing = stopRenewing
	l.wg.Go(func() { l.renewLoop(renewCtx, renewed) })
	return ctx
}

// startWatching runs the lease's watch goroutine, once the key is held.
func (l *Lease) startWatching(ctx context.Context, index uint64) {
	l.wg.Go(func() { l.watchLoop(ctx, index) })
	l.r.wg.Go(func() {
		// Close waits for the lease's goroutines through the Registry's group.
		l.wg.Wait()
	})
}

// renewLoop renews the session (and the service check) every TTL/2, retrying sooner after a failure. When no
// renewal succeeded for a whole TTL the lease is lost: Consul may already have invalidated the session,
// and a runner that cannot prove it still owns the key must stop (self-fencing). Consul itself waits
// twice the TTL before invalidating a session, so the runner stops before anyone else can take over.
func (l *Lease) renewLoop(ctx context.Context, last time.Time) {
	ttl := l.r.cfg.SessionTTL
	next := last.Add(ttl / 2)
	for {
		deadline := last.Add(ttl)
		wake := next
		if deadline.Before(wake) {
			wake = deadline
		}
		if sleep(ctx, time.Until(wake)) != nil {
			return
		}
		if !time.Now().Before(deadline) {
			l.lose("no successful renewal within the session TTL")
			return
		}
		started := time.Now()
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := l.renew(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			last, next = started, started.Add(ttl/2)
		case errors.Is(err, errSessionGone):
			l.lose("session invalidated")
			return
		default:
			l.r.log.Warn("registry: renew lease", "sandbox", l.id, "epoch", l.Entry().Epoch, "err", err)
			next = time.Now().Add(min(ttl/10, time.Second))
		}
	}
}

func (l *Lease) renew(ctx context.Context) error {
	w, cancel := l.r.write(ctx)
	defer cancel()
	se, _, err := l.r.client.Session().Renew(l.session, w)
	if err != nil {
		return err
	}
	if se == nil {
		return errSessionGone
	}
	if l.checkID != "" {
		q, cancel := l.r.query(ctx)
		defer cancel()
		if err := l.r.client.Agent().UpdateTTLOpts(l.checkID, "", api.HealthPassing, q); err != nil {
			return fmt.Errorf("update check: %w", err)
		}
	}
	return nil
}

// watchLoop follows the owner key and loses the lease as soon as the key is no longer held by its session
// (destroyed, expired, taken, deleted).
func (l *Lease) watchLoop(ctx context.Context, index uint64) {
	if l.r.awaitNotHeld(ctx, l.key, l.session, index) == nil {
		l.lose("owner key no longer held by the session")
	}
}

// awaitNotHeld follows key with blocking queries from index and returns nil once it is no longer held by
// session (destroyed, expired, taken, deleted), or ctx's error when ctx ends first. Errors of Consul are
// retried with backoff (a restarted Consul may have another index: start over with a plain read); deciding
// when an outage has lasted too long is the callers' renew loops'.
func (r *Registry) awaitNotHeld(ctx context.Context, key, session string, index uint64) error {
	backoff := 100 * time.Millisecond
	for {
		pair, meta, err := r.blockingGet(ctx, key, index)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			index = 0
			if err := sleep(ctx, backoff); err != nil {
				return err
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if pair == nil || pair.Session != session {
			return nil
		}
		index = nextIndex(index, meta.LastIndex)
	}
}

// blockingGet reads key once it changed past index (at once when index is 0).
func (r *Registry) blockingGet(ctx context.Context, key string, index uint64) (*api.KVPair, *api.QueryMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, watchWait+watchWait/16+requestTimeout)
	defer cancel()
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: watchWait}).WithContext(ctx)
	return r.client.KV().Get(key, q)
}

// nextIndex is the WaitIndex after a blocking query that returned last: reset when the index went
// backwards (Consul's state was rebuilt), never 0 after a successful query (which would not block).
func nextIndex(prev, last uint64) uint64 {
	if last < prev {
		return 0
	}
	return max(last, 1)
}

// lose closes Lost once and stops the lease's goroutines. A lease of Register's is also forgotten: nobody
// else would release it.
func (l *Lease) lose(reason string) {
	l.lostOnce.Do(func() {
		e := l.Entry()
		l.r.log.Warn("registry: lease lost", "sandbox", l.id, "epoch", e.Epoch, "alloc", e.Alloc, "reason", reason)
		close(l.lost)
	})
	l.cancel()
	if l.serviceID == "" {
		l.r.forget(l)
	}
}

func (l *Lease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// release is Release; byClose also closes Lost (the holder did not release the lease itself).
func (l *Lease) release(ctx context.Context, byClose bool) error {
	l.releaseOnce.Do(func() {
		l.cancel()
		l.wg.Wait()
		if byClose {
			l.lostOnce.Do(func() { close(l.lost) })
		}
		r := l.r
		var errs []error
		// The key goes only if this session still holds it (it may have been taken meanwhile).
		if _, err := r.txn(ctx, api.KVTxnOps{
			{Verb: api.KVCheckSession, Key: l.key, Session: l.session},
			{Verb: api.KVDelete, Key: l.key},
		}); err != nil {
			errs = append(errs, wrap(ctx, err, "delete owner key"))
		}
		w, cancel := r.write(ctx)
		if _, err := r.client.Session().Destroy(l.session, w); err != nil {
			errs = append(errs, wrap(ctx, err, "destroy session"))
		}
		cancel()
		r.forget(l)
		if r.cache != nil {
			r.cache.drop(l.id)
		}
		if l.serviceID != "" && !r.serviceInUse(l.serviceID) {
			q, cancel := r.query(ctx)
			if err := r.client.Agent().ServiceDeregisterOpts(l.serviceID, q); err != nil && !notFound(err) {
				errs = append(errs, wrap(ctx, err, "deregister service"))
			}
			cancel()
		}
		if err := errors.Join(errs...); err != nil {
			l.releaseErr = fmt.Errorf("release %s epoch %d: %w", l.id, l.Entry().Epoch, err)
		}
	})
	return l.releaseErr
}

// forget drops l from the Registry's books.
func (r *Registry) forget(l *Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.leases, l.session)
	if r.owned[l.id] == l {
		delete(r.owned, l.id)
	}
}

// serviceInUse reports whether a lease still held by r registered serviceID (a runner that Held twice under
// one alloc): releasing the older lease must not deregister the newer one's instance.
func (r *Registry) serviceInUse(serviceID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.leases {
		if l.serviceID == serviceID {
			return true
		}
	}
	return false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lockDelayed and sessionInvalid classify why Consul refused a lock in a transaction.
func lockDelayed(what string) bool {
	return containsFold(what, "lock delay") || containsFold(what, "lock-delay")
}

func sessionInvalid(what string) bool { return containsFold(what, "invalid session") }

func containsFold(s, substr string) bool { return strings.Contains(strings.ToLower(s), substr) }
