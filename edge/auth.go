package edge

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// bearer extracts the end user's token: Authorization: Bearer first, then ?token= (browsers cannot set
// headers on a WebSocket).
func bearer(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := httpx.Bearer(h) // docs/PROTOCOL.md#auth-header
		if !ok {
			return "", wire.Errorf(wire.Unauthenticated, "Authorization header must be \"Bearer <token>\"")
		}
		return tok, nil
	}
	if t := r.URL.Query().Get("token"); t != "" {
		return t, nil
	}
	return "", wire.Errorf(wire.Unauthenticated, "no token: pass Authorization: Bearer <token> or ?token=")
}

// admitted is a request that passed auth and admission and has a runner.
type admitted struct {
	claims      *token.Claims
	account     billing.Account
	budget      billing.Budget
	maxSessions int64         // per user, from the quota; < 0 unlimited
	limit       billing.Limit // the quota's caps and rates, with Config.Rates where it sets none
	lease       string        // the agent connection's session lease ("" without one)
	entry       registry.Entry
	// running: entry is the running sandbox an earlier admission found, not Ensure's answer to this one
	// (admitcache.go); a runner that cannot be reached is then asked for again, once.
	running bool
	// owner is the region that holds the user when it is another one ("": this region's runner, entry):
	// the connection or request is forwarded there over the mesh.
	owner string
	// fixed is the grant another region's edge admitted, for a forwarded connection or request.
	fixed *wire.Grant
	log   *slog.Logger
	// track follows what an agent channel delivers, for a reconnect without init (resume.go); nil for a
	// forwarded channel served here and for sandbox API requests.
	track *channelTrack
}

// admit authenticates r, checks the budget and finds or starts the user's runner. An agent channel
// (channel) is also rate limited per user and issuer and takes a session lease; the caller releases it.
func (e *Edge) admit(ctx context.Context, r *http.Request, channel bool) (*admitted, error) {
	claims, err := e.authenticate(ctx, r)
	if err != nil {
		return nil, err
	}
	return e.admitAs(ctx, claims, channel)
}

// authenticate verifies r's token.
func (e *Edge) authenticate(ctx context.Context, r *http.Request) (*token.Claims, error) {
	raw, err := bearer(r)
	if err != nil {
		e.m.authFailures.WithLabelValues("missing").Inc()
		return nil, err
	}
	claims, err := e.cfg.Verifier.Verify(ctx, raw)
	if err != nil {
		e.m.authFailures.WithLabelValues(token.Reason(err)).Inc()
		e.log.Info("auth failed", "request_id", httpx.RequestID(ctx), "reason", token.Reason(err))
		return nil, err
	}
	return claims, nil
}

// admitAs is admit for a caller whose token is verified: budget, rates, lease, runner.
func (e *Edge) admitAs(ctx context.Context, claims *token.Claims, channel bool) (*admitted, error) {
	log := e.log.With("request_id", httpx.RequestID(ctx), "issuer", claims.Issuer, "user", claims.Subject)
	acct, budget := accountOf(claims, e.cfg.Now())
	reads, err := e.readAdmission(ctx, acct, !channel)
	if err != nil {
		e.m.admissions.WithLabelValues("unavailable").Inc()
		return nil, err
	}
	if reads.disabled {
		e.m.admissions.WithLabelValues("issuer_disabled").Inc()
		return nil, issuerDisabledError(claims.Issuer)
	}
	// The effective limit is the smaller of the token's budget and the quota (user override, else the
	// issuer's default), in the token's window.
	lim := billing.EffectiveLimitWith(budget, e.cfg.Rates, reads.issuer, reads.user)
	maxSessions := int64(billing.Unlimited)
	if e.cfg.Quotas != nil {
		budget, maxSessions = lim.Budget, lim.MaxConcurrentSessions
	}
	if err := billing.CheckUsage(acct, reads.usage, budget); err != nil {
		e.m.admissions.WithLabelValues("budget_exceeded").Inc()
		return nil, budgetRefusal(err, anchorOf(claims, acct), e.cfg.Now())
	}
	a := &admitted{claims: claims, account: acct, budget: budget, maxSessions: maxSessions, limit: lim, log: log}
	if reads.running { // the user's sandbox is running (admitcache.go): no Ensure
		e.m.admissions.WithLabelValues("ok").Inc()
		a.entry, a.running, a.log = reads.entry, true, a.log.With("epoch", reads.entry.Epoch)
		return a, nil
	}
	if channel {
		if err := e.admitChannel(ctx, a); err != nil {
			return nil, err
		}
	}
	e.m.admissions.WithLabelValues("ok").Inc()
	entry, err := e.cfg.Sandboxes.Ensure(ctx, a.sandboxRequest())
	if err != nil {
		if owner := ownerRegion(err); owner != "" && owner != e.cfg.Region && e.cfg.Mesh != nil {
			// Another region serves the user: forwarded there, admitted and leased here only.
			a.owner, a.log = owner, a.log.With("owner", owner)
			return a, nil
		}
		e.releaseLease(a)
		return nil, err
	}
	a.entry, a.log = entry, a.log.With("epoch", entry.Epoch) // a.log has the lease
	if !channel {
		e.admits.setRunning(admissionKey{issuer: acct.Issuer, user: acct.User}, reads, entry, e.cfg.Now())
	}
	return a, nil
}

// sandboxRequest is what Sandboxes.Ensure is asked for a's user.
func (a *admitted) sandboxRequest() SandboxRequest {
	return SandboxRequest{Issuer: a.claims.Issuer, User: a.claims.Subject, Account: a.account, ComputeLimit: a.budget.ComputeSeconds, Anchor: a.anchor(), Template: a.claims.Template}
}

// grant is what the runner is told about this caller: for a forwarded caller, what its edge admitted.
func (a *admitted) grant(b billing.Budget) wire.Grant {
	if a.fixed != nil {
		return *a.fixed
	}
	g := wire.Grant{
		Issuer: a.claims.Issuer, User: a.claims.Subject, Window: string(a.account.Window),
		WindowStart: a.account.WindowStart, AIMicros: b.AIMicros, ComputeSeconds: b.ComputeSeconds,
		WindowAnchor: a.anchor(),
		SDKConfig:    a.claims.SDKConfig,
	}
	if !a.claims.Permissions.IsZero() {
		g.Permissions, _ = json.Marshal(a.claims.Permissions)
	}
	// The sandbox's hard limits from the user's effective quota; none set: the runner's defaults.
	if l := a.limit.Sandbox; l != (wire.SandboxLimits{}) {
		g.Limits = &l
	}
	return g
}

// accountOf maps the token's budget claims to a ledger account and limit at time now. A token without a
// budget claim is not limited by the token (quotas, when configured, still apply). A bounded window is
// anchored at the token's windowStart and rolls over: the account is the window period that contains now,
// so a long-lived token's budget renews every hour, day, week or month (docs/ARCHITECTURE.md#budget-claims).
func accountOf(c *token.Claims, now time.Time) (billing.Account, billing.Budget) {
	acct := billing.Account{Issuer: c.Issuer, User: c.Subject, Window: billing.Lifetime}
	if !c.HasBudget {
		return acct, billing.Budget{AIMicros: -1, ComputeSeconds: -1}
	}
	acct.Window = billing.Window(c.Budget.Window)
	if acct.Window != billing.Lifetime {
		acct.WindowStart = billing.CurrentWindowStart(acct.Window, c.Budget.WindowStart.UTC().Truncate(time.Second), now)
	}
	return acct, billing.Budget{AIMicros: c.Budget.AIMicros, ComputeSeconds: c.Budget.ComputeSeconds}
}

// budgetRefusal is the budget_exceeded error of a spent budget (billing.CheckUsage's): which budget, used
// of its limit, the window and when it resets, in words and in details (docs/PROTOCOL.md#errors).
func budgetRefusal(err error, anchor, now time.Time) *wire.Error {
	var be *billing.BudgetError
	if !errors.As(err, &be) {
		return wire.Wrap(wire.BudgetExceeded, err, "the budget of this window is spent")
	}
	be.ResetsAt = billing.NextWindowStart(be.Account.Window, anchor, now)
	return wire.Wrap(wire.BudgetExceeded, err, be.Describe()).WithDetails(be.Details())
}

// anchor is the token's windowStart for a bounded window (zero for lifetime): the account rolls from it.
func (a *admitted) anchor() time.Time {
	if a.fixed != nil {
		return a.fixed.WindowAnchor
	}
	return anchorOf(a.claims, a.account)
}

// anchorOf is the token's windowStart for a bounded window (zero for lifetime): the account rolls from it.
func anchorOf(c *token.Claims, acct billing.Account) time.Time {
	if acct.Window == billing.Lifetime {
		return time.Time{}
	}
	return c.Budget.WindowStart.UTC().Truncate(time.Second)
}

// admitChannel applies the connect rates and takes the connection's session lease, against the user's cap
// and the issuer's. The user's and the issuer's connect buckets are taken from all or none, so a connect
// one refuses costs the other nothing.
func (e *Edge) admitChannel(ctx context.Context, a *admitted) error {
	iss, sub := a.claims.Issuer, a.claims.Subject
	if ok, retry := e.takeRates(ctx, rateTakes("connect", a, a.limit.Rates.ConnectsPerUser, a.limit.Rates.ConnectsPerIssuer)...); !ok {
		if ctx.Err() != nil {
			return context.Cause(ctx) // the client went away while its connect was being counted
		}
		e.m.admissions.WithLabelValues("rate_limited").Inc()
		return rateLimited("too many connections; slow down", retry)
	}
	if e.cfg.Sessions == nil {
		return nil
	}
	// The lease id is the server's own, never the client's X-Request-Id: two connections sending the same
	// header would otherwise share one lease (Acquire renews a live lease of the same id), so the second
	// would pass the caps uncounted, and the first's release would end the second's.
	id := newLeaseID()
	err := e.cfg.Sessions.Acquire(ctx, billing.SessionLease{ID: id, Issuer: iss, User: sub}, a.maxSessions, a.limit.MaxIssuerSessions, leaseTTL)
	switch {
	case errors.Is(err, billing.ErrIssuerConcurrencyLimit):
		e.m.admissions.WithLabelValues("concurrency_limit").Inc()
		return wire.Wrap(wire.ConcurrencyLimit, err, "too many concurrent sessions for this issuer's users together; retry when one ends").
			WithDetails(map[string]any{"max_issuer_sessions": a.limit.MaxIssuerSessions})
	case errors.Is(err, billing.ErrConcurrencyLimit):
		e.m.admissions.WithLabelValues("concurrency_limit").Inc()
		return wire.Wrap(wire.ConcurrencyLimit, err, "too many concurrent sessions for this user; close one first").
			WithDetails(map[string]any{"max_concurrent_sessions": a.maxSessions})
	case err != nil:
		e.m.admissions.WithLabelValues("unavailable").Inc()
		return wire.Wrap(wire.Unavailable, err, "session leases are unavailable; new sessions are refused until they are back")
	}
	a.lease = id
	a.log = a.log.With("lease", id)
	return nil
}

// admitPrompt applies the prompt rates (the quota's, else the edge's defaults) to a prompt on a's channel:
// nil lets it through, a rate_limited error refuses it (the channel stays open; when ctx has ended too, the
// channel is closing). The user's and the issuer's prompt buckets are taken from all or none, so a prompt
// the issuer's bucket refuses costs the user's nothing, and the other way round.
func (e *Edge) admitPrompt(ctx context.Context, a *admitted) *wire.Error {
	if ok, retry := e.takeRates(ctx, rateTakes("prompt", a, a.limit.Rates.PromptsPerUser, a.limit.Rates.PromptsPerIssuer)...); !ok {
		return rateLimited("too many prompts; slow down", retry)
	}
	return nil
}

// rateTakes are the buckets one request of kind ("connect", "prompt") takes from: the user's and its
// issuer's, at perUser and perIssuer a minute, each holding a burst of its rate (at least 1).
func rateTakes(kind string, a *admitted, perUser, perIssuer int64) []Take {
	iss := a.claims.Issuer
	return []Take{
		{Key: kind + "/user/" + iss + "\x00" + a.claims.Subject, RatePerMin: perUser, Burst: max(perUser, 1)},
		{Key: kind + "/issuer/" + iss, RatePerMin: perIssuer, Burst: max(perIssuer, 1)},
	}
}

// newLeaseID is a session lease id made by the edge: 128 random bits, unguessable and never repeated.
func newLeaseID() string {
	return "edge/" + rand.Text()
}

// releaseLease stops renewing a's session lease and releases it.
func (e *Edge) releaseLease(a *admitted) {
	if a.lease == "" {
		return
	}
	e.leases.remove(a.lease)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.cfg.Sessions.Release(ctx, a.lease); err != nil {
		a.log.Warn("release session lease", "err", err)
	}
}

// rateLimited is a rate_limited error carrying Retry-After in whole seconds.
func rateLimited(msg string, retry time.Duration) *wire.Error {
	secs := int((retry + time.Second - 1) / time.Second)
	return wire.Errorf(wire.RateLimited, "%s", msg).WithDetails(map[string]any{"retry_after_seconds": max(secs, 1)})
}
