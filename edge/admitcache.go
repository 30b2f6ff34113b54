package edge

import (
	"context"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
)

// DefaultAdmissionCacheTTL is how long the quota reads that admit a sandbox API request (the issuer's and the
// user's quota) are reused for the same user's next requests (Config.AdmissionCacheTTL).
const DefaultAdmissionCacheTTL = time.Second

// maxAdmissionCache bounds the cached reads: one entry per user seen within the TTL, half of it per
// generation.
const maxAdmissionCache = 100_000

// admissionReads are what admission reads from the stores for one user: the issuer's and the user's quota
// (nil where none is set), which may be kept for a while, and the usage of the account's window, which is
// read for every admission.
type admissionReads struct {
	issuer, user *billing.Quota
	usage        billing.Usage
}

type admissionKey struct{ issuer, user string }

type cachedReads struct {
	admissionReads
	until time.Time
}

// admissionCache keeps a user's quotas for a short time so that a burst of sandbox API requests (exec,
// files) reads them once. The usage is never kept: a spent budget refuses the next request, so a sandbox
// stopped for its budget is not started again by a request admitted on an old read. Agent channels read
// the quotas afresh too. Errors are never kept. Two generations, swapped every TTL, make every operation
// O(1): an entry lives at most two TTLs in the maps, and is served only within one. Safe for concurrent use.
type admissionCache struct {
	ttl       time.Duration // <= 0: off
	mu        sync.Mutex
	cur, prev map[admissionKey]cachedReads
	swapAt    time.Time // when cur becomes prev
}

func (c *admissionCache) get(k admissionKey, now time.Time) (admissionReads, bool) {
	if c.ttl <= 0 {
		return admissionReads{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
	r, ok := c.cur[k]
	if !ok {
		r, ok = c.prev[k]
	}
	if !ok || !now.Before(r.until) {
		return admissionReads{}, false
	}
	return r.admissionReads, true
}

func (c *admissionCache) put(k admissionKey, r admissionReads, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
	if c.cur == nil {
		c.cur = make(map[admissionKey]cachedReads)
	}
	if len(c.cur) >= maxAdmissionCache/2 {
		return // as many users within one TTL as the bound: the others read every time
	}
	c.cur[k] = cachedReads{admissionReads: r, until: now.Add(c.ttl)}
}

// rotate drops the older generation once a TTL has passed since the last swap (two TTLs: both).
func (c *admissionCache) rotate(now time.Time) {
	switch {
	case now.Before(c.swapAt):
	case now.Before(c.swapAt.Add(c.ttl)):
		c.prev, c.cur = c.cur, nil
		c.swapAt = now.Add(c.ttl)
	default:
		c.prev, c.cur = nil, nil
		c.swapAt = now.Add(c.ttl)
	}
}

// readAdmission reads what admits acct's user: the quotas from the cache for a sandbox API request (cached
// true), from the store for an agent channel and on a miss; the usage from the ledger. A store that fails
// is a typed unavailable error.
func (e *Edge) readAdmission(ctx context.Context, acct billing.Account, cached bool) (admissionReads, error) {
	k := admissionKey{issuer: acct.Issuer, user: acct.User}
	now := e.cfg.Now()
	r, hit := admissionReads{}, false
	if cached && e.cfg.Quotas != nil {
		r, hit = e.admits.get(k, now)
	}
	switch {
	case e.cfg.Quotas == nil:
	case hit:
		e.m.admissionReads.WithLabelValues("cached").Inc()
	default:
		e.m.admissionReads.WithLabelValues("read").Inc()
		var err error
		if r.issuer, r.user, err = billing.UserQuotas(ctx, e.cfg.Quotas, acct.Issuer, acct.User); err != nil {
			return r, wire.Wrap(wire.Unavailable, err, "quotas are unavailable; new sessions are refused until they are back")
		}
		if cached {
			e.admits.put(k, r, now)
		}
	}
	u, err := e.cfg.Ledger.Usage(ctx, acct)
	if err != nil {
		return r, wire.Wrap(wire.Unavailable, err, "the ledger is unavailable; new sessions are refused until it is back")
	}
	r.usage = u
	return r, nil
}
