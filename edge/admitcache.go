package edge

import (
	"context"
	"errors"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/gencache"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/wire"
)

// DefaultAdmissionCacheTTL is how long the quota reads that admit a sandbox API request (the issuer's and the
// user's quota) are reused for the same user's next requests (Config.AdmissionCacheTTL).
const DefaultAdmissionCacheTTL = time.Second

// maxAdmissionCache bounds the cached reads: one entry per user seen within the TTL, half of it per
// generation.
const maxAdmissionCache = 100_000

// runningAdmissionTTL is how long a sandbox API request may be admitted on the usage read of the same user's
// last fully admitted one, and relayed to the runner that one found, without reading the usage or asking
// Sandboxes.Ensure again (docs/ARCHITECTURE.md#admission).
const runningAdmissionTTL = 250 * time.Millisecond

// admissionReads are what admission reads from the stores for one user: the issuer's and the user's quota
// (nil where none is set), which may be kept for a while, and the usage of the account's window, read for
// every admission that may start or claim a sandbox. running is set when the usage and entry are the
// kept ones of a running sandbox (admissionCache.running).
type admissionReads struct {
	issuer, user *billing.Quota
	disabled     bool // the issuer is disabled (Config.Issuers)
	usage        billing.Usage
	acct         billing.Account // whose usage it is (a user's tokens may name other windows)
	at           time.Time       // when the usage was read
	running      bool
	entry        registry.Entry // of a running sandbox, with running
}

type admissionKey struct{ issuer, user string }

type cachedReads struct {
	admissionReads
	until time.Time
	// runUntil: until then, usage and entry (a runner this edge relayed to, found by a full admission whose
	// usage read is usage) admit the user's sandbox API requests without a usage read or an Ensure.
	runUntil time.Time
}

// admissionCache keeps a user's quotas for a short time so that a burst of sandbox API requests (exec,
// files) reads them once. The usage is kept only with the runner a full admission found (setRunning), for
// runningAdmissionTTL: a request admitted on it goes to that running sandbox and never asks Ensure, so a
// spent budget still refuses the next request that could start or claim a sandbox (a sandbox stopped for its
// budget is not started again by a request admitted on an old read), and what a request to a running sandbox
// spends is bounded where it is spent (model calls by the model proxy's holds, compute by the scheduler's
// meter, which stops the sandbox). A runner that cannot be dialled, or another one answering at its
// address, drops it (dropRunning). Agent channels read the quotas and the usage afresh. Errors are never
// kept. The entries are in a gencache (two generations, O(1), at most two TTLs in the maps) and are served
// only within one TTL. Safe for concurrent use.
type admissionCache struct {
	ttl time.Duration // <= 0: off
	gen *gencache.Cache[admissionKey, cachedReads]
}

func newAdmissionCache(ttl time.Duration) admissionCache {
	return admissionCache{ttl: ttl, gen: &gencache.Cache[admissionKey, cachedReads]{TTL: ttl, MaxEntries: maxAdmissionCache}}
}

func (c *admissionCache) get(k admissionKey, now time.Time) (admissionReads, bool) {
	if c.ttl <= 0 {
		return admissionReads{}, false
	}
	r, ok := c.gen.Get(k, now)
	if !ok || !now.Before(r.until) {
		return admissionReads{}, false
	}
	r.running = now.Before(r.runUntil)
	return r.admissionReads, true
}

// setRunning keeps, with k's quotas, the usage read at r.at and the runner entry a full admission found, for
// runningAdmissionTTL from the read (never past the quotas' own TTL). Kept in the older generation, or not
// at all: the next request reads.
func (c *admissionCache) setRunning(k admissionKey, r admissionReads, entry registry.Entry, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.gen.Update(k, now, func(cr cachedReads) cachedReads {
		cr.usage, cr.acct, cr.at, cr.entry, cr.runUntil = r.usage, r.acct, r.at, entry, r.at.Add(runningAdmissionTTL)
		return cr
	})
}

// dropRunning forgets k's running sandbox: its next request reads the usage and asks Ensure.
func (c *admissionCache) dropRunning(k admissionKey) {
	if c.ttl <= 0 {
		return
	}
	c.gen.UpdateAll(k, func(cr cachedReads) cachedReads {
		cr.runUntil = time.Time{}
		return cr
	})
}

// put keeps k's quotas for the TTL; as many users within one TTL as the bound: the others read every time.
func (c *admissionCache) put(k admissionKey, r admissionReads, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.gen.Put(k, cachedReads{admissionReads: r, until: now.Add(c.ttl)}, 0, now)
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
	case hit && r.running && sameAccount(r.acct, acct):
		// The user's sandbox was found running by an admission that read the usage less than
		// runningAdmissionTTL ago: relayed to it on that read (no Ensure, so nothing is started or claimed).
		e.m.admissionReads.WithLabelValues("running").Inc()
		return r, nil
	case hit:
		e.m.admissionReads.WithLabelValues("cached").Inc()
	default:
		e.m.admissionReads.WithLabelValues("read").Inc()
		var err error
		if r.issuer, r.user, err = billing.UserQuotas(ctx, e.cfg.Quotas, acct.Issuer, acct.User); err != nil {
			return r, wire.Wrap(wire.Unavailable, err, "quotas are unavailable; new sessions are refused until they are back")
		}
		if r.disabled, err = e.issuerDisabled(ctx, acct.Issuer); err != nil {
			return r, err
		}
		if cached {
			e.admits.put(k, r, now)
		}
	}
	u, err := e.cfg.Ledger.Usage(ctx, acct)
	if err != nil {
		return r, wire.Wrap(wire.Unavailable, err, "the ledger is unavailable; new sessions are refused until it is back")
	}
	r.usage, r.acct, r.at, r.running = u, acct, now, false
	return r, nil
}

// sameAccount reports whether a and b are one ledger account (the same window of the same user).
func sameAccount(a, b billing.Account) bool {
	return a.Issuer == b.Issuer && a.User == b.User && a.Window == b.Window && a.WindowStart.Equal(b.WindowStart)
}

// issuerDisabled reads whether iss is disabled (Config.Issuers; none: never). An issuer not registered is
// not disabled.
func (e *Edge) issuerDisabled(ctx context.Context, iss string) (bool, error) {
	if e.cfg.Issuers == nil {
		return false, nil
	}
	is, err := e.cfg.Issuers.GetIssuer(ctx, iss)
	switch {
	case errors.Is(err, billing.ErrNotFound):
		return false, nil
	case err != nil:
		return false, wire.Wrap(wire.Unavailable, err, "issuers are unavailable; new sessions are refused until they are back")
	}
	return is.Disabled, nil
}

// issuerDisabledError refuses a disabled issuer's token.
func issuerDisabledError(iss string) *wire.Error {
	return wire.Errorf(wire.PermissionDenied, "issuer %s is disabled: its tokens are refused", iss).
		WithDetails(map[string]any{"reason": "issuer_disabled"})
}
