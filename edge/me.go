package edge

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// SandboxStatus is what the scheduler knows of a user's sandbox (GET /v1/me).
type SandboxStatus struct {
	State  string // wire.SandboxAbsent, SandboxStarting, SandboxRunning or SandboxAsleep
	Region string
	Epoch  int64
	Since  time.Time
}

// StatusReader reads a user's sandbox without starting or claiming one. Config.Sandboxes may implement it
// (the scheduler, in-process or through scheduler/remote, does); without it GET /v1/me says
// wire.SandboxUnknown. Safe for concurrent use; errors are the store's.
type StatusReader interface {
	SandboxStatus(ctx context.Context, issuer, user string) (SandboxStatus, error)
}

// serveMe answers GET /v1/me: the caller's budget left in the token's current window (after the quota),
// its sandbox's state, live sessions and the limits in force. It admits nothing and starts nothing, so
// it answers a user whose budget is spent too.
func (e *Edge) serveMe(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := httpx.NewStatusWriter(w)
	defer func() {
		e.m.requests.WithLabelValues("me", strconv.Itoa(sw.Status())).Inc()
		e.m.latency.WithLabelValues("me").Observe(time.Since(start).Seconds())
	}()
	log := e.log.With("request_id", httpx.RequestID(r.Context()))
	claims, err := e.authenticate(r.Context(), r)
	if err == nil {
		var me wire.Me
		if me, err = e.me(r.Context(), claims); err == nil {
			sw.Header().Set("Cache-Control", "no-store")
			_ = httpx.WriteJSON(sw, http.StatusOK, me)
			return
		}
	}
	wire.WriteHTTPError(sw, log, err)
}

// me reads what serveMe answers for claims' user.
func (e *Edge) me(ctx context.Context, claims *token.Claims) (wire.Me, error) {
	now := e.cfg.Now()
	acct, budget := accountOf(claims, now)
	reads, err := e.readAdmission(ctx, acct, true)
	if err != nil {
		return wire.Me{}, err
	}
	if reads.disabled {
		return wire.Me{}, issuerDisabledError(claims.Issuer)
	}
	lim := billing.EffectiveLimitWith(budget, e.cfg.Rates, reads.issuer, reads.user)
	maxSessions := int64(billing.Unlimited)
	if e.cfg.Quotas != nil {
		budget, maxSessions = lim.Budget, lim.MaxConcurrentSessions
	}
	me := wire.Me{
		Issuer: claims.Issuer, User: claims.Subject, Region: e.cfg.Region,
		Budget: wire.MeBudget{Window: string(acct.Window),
			AI:      wire.NewAllowance(budget.AIMicros, reads.usage.AIMicros),
			Compute: wire.NewAllowance(budget.ComputeSeconds, reads.usage.ComputeSeconds)},
		Sandbox:  wire.MeSandbox{State: wire.SandboxUnknown},
		Sessions: wire.MeSessions{Live: -1, Max: max(maxSessions, -1)},
		Rates:    wire.MeRates{ConnectsPerMinute: max(lim.Rates.ConnectsPerUser, -1), PromptsPerMinute: max(lim.Rates.PromptsPerUser, -1)},
		Limits:   lim.Sandbox,
	}
	if acct.Window != billing.Lifetime {
		me.Budget.WindowStart = acct.WindowStart
		me.Budget.ResetsAt = billing.NextWindowStart(acct.Window, anchorOf(claims, acct), now)
	}
	if sr, ok := e.cfg.Sandboxes.(StatusReader); ok {
		st, err := sr.SandboxStatus(ctx, claims.Issuer, claims.Subject)
		if err != nil {
			return wire.Me{}, wire.Wrap(wire.Unavailable, err, "the sandbox's state cannot be read")
		}
		me.Sandbox = wire.MeSandbox{State: st.State, Region: st.Region, Epoch: st.Epoch, Since: st.Since}
	}
	if e.cfg.Sessions != nil {
		live, _, err := e.cfg.Sessions.Count(ctx, claims.Issuer, claims.Subject)
		if err != nil {
			return wire.Me{}, wire.Wrap(wire.Unavailable, err, "session leases are unavailable")
		}
		me.Sessions.Live = live
	}
	return me, nil
}
