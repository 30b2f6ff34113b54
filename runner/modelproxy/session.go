package modelproxy

import (
	"crypto/rand"
	"crypto/sha256"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// tokenPrefix marks session tokens so a leaked one is recognisable (and never mistaken for an API key).
const tokenPrefix = "warren-session-"

// ModelUsage is one model's share of a session's usage; its JSON is an entry of the result's
// cost.models (docs/PROTOCOL.md#cost).
type ModelUsage struct {
	billing.TokenUsage
	Microdollars int64 `json:"microdollars"`
}

// SessionUsage is what a session's model calls used, cumulative since OpenSession, plus what happened
// in the current turn (since the last TurnStart).
type SessionUsage struct {
	// AIMicros is the cost settled for the session's calls.
	AIMicros int64
	// Models is usage by the model name the agent asked for.
	Models map[string]ModelUsage
	// Calls counts the calls answered by the model (whatever their outcome upstream).
	Calls int
	// BudgetExhausted reports that in this turn a call was refused because the budget was spent, or a
	// call's reported usage cost more than its reservation. The runner ends such a turn with a result of
	// subtype error_max_budget_usd.
	BudgetExhausted bool
	// MeteringUnavailable reports that in this turn a call was refused because the ledger could not be
	// reached.
	MeteringUnavailable bool
}

// Since is the usage of u beyond base, an earlier snapshot of the same session (TurnStart's): the
// per-turn cost the runner reports. The turn flags are u's.
func (u SessionUsage) Since(base SessionUsage) SessionUsage {
	d := SessionUsage{
		AIMicros:            u.AIMicros - base.AIMicros,
		Calls:               u.Calls - base.Calls,
		Models:              map[string]ModelUsage{},
		BudgetExhausted:     u.BudgetExhausted,
		MeteringUnavailable: u.MeteringUnavailable,
	}
	for name, m := range u.Models {
		b := base.Models[name]
		dm := ModelUsage{
			TokenUsage: billing.TokenUsage{
				InputTokens:              m.InputTokens - b.InputTokens,
				OutputTokens:             m.OutputTokens - b.OutputTokens,
				CacheReadInputTokens:     m.CacheReadInputTokens - b.CacheReadInputTokens,
				CacheCreationInputTokens: m.CacheCreationInputTokens - b.CacheCreationInputTokens,
			},
			Microdollars: m.Microdollars - b.Microdollars,
		}
		if dm != (ModelUsage{}) {
			d.Models[name] = dm
		}
	}
	return d
}

// session is one agent's standing with the proxy.
type session struct {
	id string
	// token is the live token ("" once revoked) and tokenHash its key in sessions.byToken; both guarded
	// by sessions.mu.
	token     string
	tokenHash [32]byte

	mu     sync.Mutex
	acct   billing.Account
	anchor time.Time // non-zero: acct's window rolls over from it (billing.CurrentWindowStart)
	limit  int64
	models []string // non-empty: the only models the session's calls may name
	turns  int      // turns running (TurnStart without TurnEnd)
	// Rate limits (Config.MessagesPerMinute, CountTokensPerMinute).
	messages, counts bucket
	usage            SessionUsage
	// The grace allowance (Config.Grace) for calls made while the ledger is unavailable: graceUsed is what
	// such calls cost since the ledger last answered, graceHeld what those in flight may still cost.
	// graceEpoch counts the answers that made the grace whole again, so a call begun before one is not
	// charged to the new grace.
	graceUsed, graceHeld int64
	graceEpoch           uint64
}

// budget is the account a call at now is charged to, and its limit: with an anchor, the window period that
// contains now, so a session that outlives its window charges the next one.
func (s *session) budget(now time.Time) (billing.Account, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	acct := s.acct
	if !s.anchor.IsZero() && acct.Window != billing.Lifetime {
		acct.WindowStart = billing.CurrentWindowStart(acct.Window, s.anchor, now)
	}
	return acct, s.limit
}

func (s *session) snapshot() SessionUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usage
	u.Models = maps.Clone(s.usage.Models)
	if u.Models == nil {
		u.Models = map[string]ModelUsage{}
	}
	return u
}

func (s *session) add(model string, tu billing.TokenUsage, micros int64, overspent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.usage.Models == nil {
		s.usage.Models = map[string]ModelUsage{}
	}
	m := s.usage.Models[model]
	m.TokenUsage = m.TokenUsage.Add(tu)
	m.Microdollars += micros
	s.usage.Models[model] = m
	s.usage.AIMicros += micros
	s.usage.Calls++
	if overspent {
		s.usage.BudgetExhausted = true
	}
}

// takeGrace holds up to want microdollars of the session's grace (total per outage) for one call; held is
// 0 when nothing is left.
func (s *session) takeGrace(total, want int64) (held int64, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if left := total - s.graceUsed - s.graceHeld; left > 0 {
		held = min(want, left)
		s.graceHeld += held
	}
	return held, s.graceEpoch
}

// endGrace ends a call takeGrace let through: its hold is given back and its cost charged, unless the
// ledger answered since it began (the grace is whole again then, and the cost is on its way to the ledger
// through the spool).
func (s *session) endGrace(held, cost int64, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.graceHeld -= held
	if epoch == s.graceEpoch {
		s.graceUsed += cost
	}
}

// resetGrace makes the grace whole again: the ledger answered.
func (s *session) resetGrace() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.graceUsed != 0 || s.graceHeld != 0 {
		s.graceUsed = 0
		s.graceEpoch++
	}
}

func (s *session) refused(budget bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if budget {
		s.usage.BudgetExhausted = true
	} else {
		s.usage.MeteringUnavailable = true
	}
}

// sessions indexes sessions by id and by the hash of their token: lookups by a hash make the map's timing
// say nothing about the tokens.
type sessions struct {
	mu      sync.RWMutex
	byID    map[string]*session
	byToken map[[32]byte]*session
}

// SessionGrant is what a session's calls may spend and name.
type SessionGrant struct {
	// Account is charged; with a non-zero Anchor its bounded window rolls over from it (the token's
	// windowStart): every call is charged to the window period that contains the proxy's clock at that call.
	Account billing.Account
	Anchor  time.Time
	// AILimit is the account's limit in microdollars (negative: unlimited). The ledger may cap it further
	// with the user's current quota (billing.Reserver).
	AILimit int64
	// Models, when non-empty, are the only models the session's calls may name (the token's
	// permissions.model); any other is refused with 403 permission_error.
	Models []string
}

// OpenSession admits an agent: calls carrying the returned token (as x-api-key, or Authorization: Bearer)
// are charged to acct under aiLimit microdollars (negative: unlimited). See Open.
func (p *Proxy) OpenSession(sessionID string, acct billing.Account, aiLimit int64) (token string) {
	return p.Open(sessionID, SessionGrant{Account: acct, AILimit: aiLimit})
}

// OpenRollingSession is OpenSession for an account whose bounded window rolls over from anchor. A zero
// anchor keeps acct's window fixed.
func (p *Proxy) OpenRollingSession(sessionID string, acct billing.Account, anchor time.Time, aiLimit int64) (token string) {
	return p.Open(sessionID, SessionGrant{Account: acct, Anchor: anchor, AILimit: aiLimit})
}

// Open admits an agent under g and returns the session's live token, issuing one when the session has
// none (new, or its token was revoked). Opening an id that is already open keeps its live token, usage,
// rate buckets and running turns and replaces its grant (a new budget window, a new limit, other models);
// RotateToken issues a fresh token. Safe for concurrent use.
func (p *Proxy) Open(sessionID string, g SessionGrant) (token string) {
	p.sess.mu.Lock()
	defer p.sess.mu.Unlock()
	s, ok := p.sess.byID[sessionID]
	if !ok {
		s = &session{id: sessionID, messages: newBucket(p.rates.messages), counts: newBucket(p.rates.counts)}
		s.usage.Models = map[string]ModelUsage{}
		p.sess.byID[sessionID] = s
	}
	s.mu.Lock()
	s.acct, s.anchor, s.limit, s.models = g.Account, g.Anchor, g.AILimit, slices.Clone(g.Models)
	s.mu.Unlock()
	if s.token == "" {
		p.sess.issueLocked(s)
	}
	return s.token
}

// RotateToken gives an open session a fresh token and revokes the one it had: calls carrying the old
// token get 401 from now on. It returns "" for a session that is not open. The runner rotates at every
// start of a session's agent process, so a token never outlives the process it was given to.
func (p *Proxy) RotateToken(sessionID string) string {
	p.sess.mu.Lock()
	defer p.sess.mu.Unlock()
	s, ok := p.sess.byID[sessionID]
	if !ok {
		return ""
	}
	p.sess.revokeLocked(s)
	p.sess.issueLocked(s)
	return s.token
}

// RevokeToken revokes token when it is still sessionID's live token: calls carrying it get 401 from now
// on; calls in flight finish and are settled. The session keeps its usage; Open or RotateToken issue a new
// token. A token that is not the session's (already rotated) is left alone.
func (p *Proxy) RevokeToken(sessionID, token string) {
	p.sess.mu.Lock()
	defer p.sess.mu.Unlock()
	if s, ok := p.sess.byID[sessionID]; ok && token != "" && s.token == token {
		p.sess.revokeLocked(s)
	}
}

// CloseSession forgets a session: its token stops working at once. Calls in flight finish and are
// settled. Closing an unknown id does nothing.
func (p *Proxy) CloseSession(sessionID string) {
	p.sess.mu.Lock()
	defer p.sess.mu.Unlock()
	if s, ok := p.sess.byID[sessionID]; ok {
		p.sess.revokeLocked(s)
		delete(p.sess.byID, sessionID)
	}
}

func (ss *sessions) issueLocked(s *session) {
	s.token = tokenPrefix + rand.Text()
	s.tokenHash = sha256.Sum256([]byte(s.token))
	ss.byToken[s.tokenHash] = s
}

func (ss *sessions) revokeLocked(s *session) {
	if s.token != "" {
		delete(ss.byToken, s.tokenHash)
		s.token, s.tokenHash = "", [32]byte{}
	}
}

// Usage returns the session's cumulative usage and the current turn's flags; the zero SessionUsage (with
// an empty Models map) for an unknown session.
func (p *Proxy) Usage(sessionID string) SessionUsage {
	if s := p.sessionByID(sessionID); s != nil {
		return s.snapshot()
	}
	return SessionUsage{Models: map[string]ModelUsage{}}
}

// TurnStart begins a turn: it clears the turn flags (BudgetExhausted, MeteringUnavailable) and returns the
// cumulative usage so far, the base for SessionUsage.Since at the end of the turn. With
// Config.RequireTurn, the session's calls are accepted only between TurnStart and its TurnEnd.
func (p *Proxy) TurnStart(sessionID string) SessionUsage {
	s := p.sessionByID(sessionID)
	if s == nil {
		return SessionUsage{Models: map[string]ModelUsage{}}
	}
	s.mu.Lock()
	s.usage.BudgetExhausted, s.usage.MeteringUnavailable = false, false
	s.turns++
	s.mu.Unlock()
	return s.snapshot()
}

// TurnEnd ends the turn TurnStart began. With Config.RequireTurn, calls of the session are refused (403)
// until its next TurnStart: processes the agent left behind cannot spend between turns. Calls in flight
// finish and are settled.
func (p *Proxy) TurnEnd(sessionID string) {
	if s := p.sessionByID(sessionID); s != nil {
		s.mu.Lock()
		s.turns = max(0, s.turns-1)
		s.mu.Unlock()
	}
}

// admitRequest applies the session's standing to one request: a running turn (with Config.RequireTurn)
// and its rate bucket for the route. ok is false when an answer was written.
func (p *Proxy) admitRequest(w http.ResponseWriter, s *session, count bool) bool {
	s.mu.Lock()
	idle := p.requireTurn && s.turns == 0
	var ok bool
	var wait time.Duration
	if !idle {
		b := &s.messages
		if count {
			b = &s.counts
		}
		ok, wait = b.take(p.now())
	}
	s.mu.Unlock()
	switch {
	case idle:
		p.m.rejected.WithLabelValues(rejectNoTurn).Inc()
		writeAPIError(w, errNoTurn)
		return false
	case !ok:
		p.m.rejected.WithLabelValues(rejectRate).Inc()
		what := "model"
		if count {
			what = "count_tokens"
		}
		writeRateLimited(w, what, wait)
		return false
	}
	return true
}

// allowedModels is the session's model allow list (nil: any).
func (s *session) allowedModels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.models
}

func (p *Proxy) sessionByID(id string) *session {
	p.sess.mu.RLock()
	defer p.sess.mu.RUnlock()
	return p.sess.byID[id]
}

func (p *Proxy) sessionByToken(token string) *session {
	if token == "" {
		return nil
	}
	h := sha256.Sum256([]byte(token))
	p.sess.mu.RLock()
	defer p.sess.mu.RUnlock()
	return p.sess.byToken[h]
}
