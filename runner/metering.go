package runner

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/modelproxy"
	"github.com/warren-mesh/warren/runner/session"
	"github.com/warren-mesh/warren/runner/tasks"
)

// meteredAgent wraps the agent driver with what the runner owns around a turn: the session is opened with the
// model proxy under the grant of the newest admitted caller, every `result` gets Warren's cost extension
// (docs/PROTOCOL.md#cost) computed from what the proxy settled in that turn, a turn that hit the budget ends
// with subtype error_max_budget_usd, and a snapshot is taken after every completed turn.
type meteredAgent struct {
	inner     session.Agent
	proxy     *modelproxy.Proxy
	proxyURL  func() string
	grant     func() wire.Grant
	models    func(wire.Grant) []string // the models a grant allows (nil: any)
	afterTurn func(ctx context.Context) // snapshot; nil when persistence is off
	now       func() time.Time
	log       *slog.Logger

	mu     sync.Mutex
	turns  map[string]turnMark
	grants map[string]wire.Grant // per session: the grant of the connection that sent the running prompt
}

type turnMark struct {
	base  modelproxy.SessionUsage
	start time.Time
}

var (
	_ session.Agent  = (*meteredAgent)(nil)
	_ session.Warmer = (*meteredAgent)(nil)
)

// grantOf is the grant a session's turns run under: the prompting connection's, else the newest.
func (m *meteredAgent) grantOf(sessionID string) wire.Grant {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g, ok := m.grants[sessionID]; ok {
		return g
	}
	return m.grant()
}

// open (re)opens the session with the proxy under its grant: account, limit and allowed models.
func (m *meteredAgent) open(sessionID string) {
	g := m.grantOf(sessionID)
	sg := modelproxy.SessionGrant{Account: accountOf(g), Anchor: g.WindowAnchor.UTC(), AILimit: g.AIMicros}
	if m.models != nil {
		sg.Models = m.models(g)
	}
	m.proxy.Open(sessionID, sg)
}

// Endpoint is the driver's view of the model: the runner's proxy and a fresh token for the session's new
// agent process (any earlier token of the session is revoked; Release revokes this one when the process
// exits).
func (m *meteredAgent) Endpoint(sessionID string) (string, string, error) {
	m.open(sessionID)
	return m.proxyURL(), m.proxy.RotateToken(sessionID), nil
}

// Release revokes the token of an agent process that has exited.
func (m *meteredAgent) Release(sessionID, token string) { m.proxy.RevokeToken(sessionID, token) }

// Run implements session.Agent.
func (m *meteredAgent) Run(ctx context.Context, turn session.Turn, emit func([]byte)) error {
	if g, ok := turn.Meta.(wire.Grant); ok {
		m.mu.Lock()
		m.grants[turn.SessionID] = g
		m.mu.Unlock()
	}
	m.open(turn.SessionID)
	// The session's token works only while this turn runs (modelproxy.Config.RequireTurn): processes the
	// agent leaves behind cannot spend between turns.
	mark := turnMark{base: m.proxy.TurnStart(turn.SessionID), start: m.now()}
	m.mu.Lock()
	m.turns[turn.SessionID] = mark
	m.mu.Unlock()
	err := m.inner.Run(ctx, turn, emit)
	m.proxy.TurnEnd(turn.SessionID)
	if m.afterTurn != nil {
		m.afterTurn(context.WithoutCancel(ctx))
	}
	return err
}

// Check implements session.Checker for the driver it wraps.
func (m *meteredAgent) Check(ctx context.Context, c session.Check) (session.Checked, error) {
	if ck, ok := m.inner.(session.Checker); ok {
		return ck.Check(ctx, c)
	}
	return session.Checked{}, nil
}

// Warm implements session.Warmer for the driver it wraps.
func (m *meteredAgent) Warm(sessionID string, opts wire.SessionOptions, meta any) {
	if w, ok := m.inner.(session.Warmer); ok {
		w.Warm(sessionID, opts, meta)
	}
}

// Cool implements session.Warmer for the driver it wraps.
func (m *meteredAgent) Cool(sessionID string) {
	if w, ok := m.inner.(session.Warmer); ok {
		w.Cool(sessionID)
	}
}

// Cost is the Warren extension on every result (tasks.Cost: a task records its turn's).
type Cost = tasks.Cost

// Decorate adds the cost of the turn to a result event and marks a budget-ended turn.
func (m *meteredAgent) Decorate(sessionID string, event []byte) []byte {
	var obj map[string]json.RawMessage
	if err := strictjson.Unmarshal(event, &obj, strictjson.AllowInvalidUTF8); err != nil {
		return event
	}
	m.mu.Lock()
	mark, ok := m.turns[sessionID]
	m.mu.Unlock()
	if !ok {
		mark = turnMark{base: modelproxy.SessionUsage{Models: map[string]modelproxy.ModelUsage{}}, start: m.now()}
	}
	d := m.proxy.Usage(sessionID).Since(mark.base)
	cost := Cost{
		AIMicrodollars: d.AIMicros,
		ComputeSeconds: math.Round(m.now().Sub(mark.start).Seconds()*1000) / 1000,
		Models:         d.Models,
	}
	set := func(k string, v any) {
		b, _ := json.Marshal(v)
		obj[k] = b
	}
	set("cost", cost)
	set("total_cost_usd", float64(d.AIMicros)/1e6)
	set("modelUsage", modelUsage(obj["modelUsage"], d.Models))
	if d.BudgetExhausted {
		set("subtype", "error_max_budget_usd")
		set("is_error", true)
		addError(obj, "Reached the AI budget of this session's token")
	}
	if isErrorResult(obj) {
		// The Agent SDK's error results explain themselves in errors.
		var text string
		_ = strictjson.Unmarshal(obj["result"], &text, strictjson.AllowInvalidUTF8)
		addError(obj, text)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return event
	}
	return out
}

// modelUsage is the result's modelUsage with each model's costUSD replaced by what Warren charged for
// it, so that the models' costs add up to total_cost_usd; a model the proxy charged that the CLI did not
// list is added.
func modelUsage(raw json.RawMessage, charged map[string]modelproxy.ModelUsage) map[string]map[string]any {
	usage := map[string]map[string]any{}
	_ = strictjson.Unmarshal(raw, &usage, strictjson.AllowInvalidUTF8)
	for name, u := range usage {
		if u == nil {
			u = map[string]any{}
			usage[name] = u
		}
		u["costUSD"] = float64(charged[name].Microdollars) / 1e6
	}
	for name, c := range charged {
		if _, ok := usage[name]; !ok {
			usage[name] = map[string]any{
				"inputTokens": c.InputTokens, "outputTokens": c.OutputTokens,
				"cacheReadInputTokens": c.CacheReadInputTokens, "cacheCreationInputTokens": c.CacheCreationInputTokens,
				"costUSD": float64(c.Microdollars) / 1e6,
			}
		}
	}
	return usage
}

// isErrorResult reports whether a result is an error in the Agent SDK's sense: an error_* subtype.
func isErrorResult(obj map[string]json.RawMessage) bool {
	var subtype string
	_ = strictjson.Unmarshal(obj["subtype"], &subtype, strictjson.AllowInvalidUTF8)
	return strings.HasPrefix(subtype, "error_")
}

// addError appends msg to the result's errors list unless it is empty or there already.
func addError(obj map[string]json.RawMessage, msg string) {
	var errs []string
	_ = strictjson.Unmarshal(obj["errors"], &errs, strictjson.AllowInvalidUTF8)
	if msg == "" || slices.Contains(errs, msg) {
		if errs == nil {
			errs = []string{}
		}
	} else {
		errs = append(errs, msg)
	}
	b, _ := json.Marshal(errs)
	obj["errors"] = b
}

func accountOf(g wire.Grant) billing.Account {
	a := billing.Account{Issuer: g.Issuer, User: g.User, Window: billing.Window(g.Window)}
	if a.Window == "" {
		a.Window = billing.Lifetime
	}
	if a.Window != billing.Lifetime {
		a.WindowStart = g.WindowStart.UTC().Truncate(time.Second)
	}
	return a
}
