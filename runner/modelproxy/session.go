package modelproxy

import (
	"crypto/rand"
	"crypto/sha256"
	"maps"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// tokenPrefix marks session tokens so a leaked one is recognisable (and never mistaken for an API key).
const tokenPrefix = "warren-session-"

// ModelUsage is one model's share of a session's usage; its JSON is an entry of the result's
// cost.models (PROTOCOL.md §3).
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
	id        string
	token     string
	tokenHash [32]byte

	mu     sync.Mutex
	acct   billing.Account
	anchor time.Time // non-zero: acct's window rolls over from it (billing.CurrentWindowStart)
	limit  int64
	usage  SessionUsage
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

// OpenSession admits an agent: calls carrying the returned token (as x-api-key, or Authorization: Bearer)
// are charged to acct under aiLimit microdollars (negative: unlimited). Opening an id that is already open
// keeps its token and usage and updates its account and limit (a new budget window); open a fresh token
// with CloseSession first. Safe for concurrent use.
func (p *Proxy) OpenSession(sessionID string, acct billing.Account, aiLimit int64) (token string) {
	return p.OpenRollingSession(sessionID, acct, time.Time{}, aiLimit)
}

// OpenRollingSession is OpenSession for an account whose bounded window rolls over from anchor (the token's
// windowStart): every call is charged to the window period that contains the proxy's clock at that call.
// A zero anchor keeps acct's window fixed.
func (p *Proxy) OpenRollingSession(sessionID string, acct billing.Account, anchor time.Time, aiLimit int64) (token string) {
	p.sess.mu.Lock()
	defer p.sess.mu.Unlock()
	if s, ok := p.sess.byID[sessionID]; ok {
		s.mu.Lock()
		s.acct, s.anchor, s.limit = acct, anchor, aiLimit
		s.mu.Unlock()
		return s.token
	}
	token = tokenPrefix + rand.Text()
	s := &session{id: sessionID, token: token, tokenHash: sha256.Sum256([]byte(token)), acct: acct, anchor: anchor, limit: aiLimit}
	s.usage.Models = map[string]ModelUsage{}
	p.sess.byID[sessionID] = s
	p.sess.byToken[s.tokenHash] = s
	return token
}

// CloseSession forgets a session: its token stops working at once. Calls in flight finish and are
// settled. Closing an unknown id does nothing.
func (p *Proxy) CloseSession(sessionID string) {
	p.sess.mu.Lock()
	defer p.sess.mu.Unlock()
	if s, ok := p.sess.byID[sessionID]; ok {
		delete(p.sess.byToken, s.tokenHash)
		delete(p.sess.byID, sessionID)
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
// cumulative usage so far, the base for SessionUsage.Since at the end of the turn.
func (p *Proxy) TurnStart(sessionID string) SessionUsage {
	s := p.sessionByID(sessionID)
	if s == nil {
		return SessionUsage{Models: map[string]ModelUsage{}}
	}
	s.mu.Lock()
	s.usage.BudgetExhausted, s.usage.MeteringUnavailable = false, false
	s.mu.Unlock()
	return s.snapshot()
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
