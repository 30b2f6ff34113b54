package session

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// ToolCaller runs the calls an agent makes to tools its client executes (docs/PROTOCOL.md#host-tools).
// The hub gives one to every turn (Turn.Tools).
type ToolCaller interface {
	// CallTool sends the call to the session's clients as a tool_call and waits for the first tool_result,
	// the tool timeout, or ctx. It always returns a result: a failed call is an error result
	// (IsError) saying why, which is what the agent is given.
	CallTool(ctx context.Context, call ToolCall) wire.ToolResult
}

// ToolCall is one call of a client tool.
type ToolCall struct {
	// Name is the name the agent called: mcp__<server>__<tool>.
	Name string
	// Server is the client tool server that declared the tool, and CallName the toolName its tool_call
	// carries (wire.MCPServer.CallName); empty CallName: Name.
	Server, CallName string
	Input            json.RawMessage
	// ToolUseID is the agent's tool_use id, when known.
	ToolUseID string
	// Timeout is how long the call waits for its answer; 0 is the hub's ToolTimeout.
	Timeout time.Duration
}

const (
	// DefaultToolTimeout is how long a tool call waits for its tool_result.
	DefaultToolTimeout = 5 * time.Minute
	// maxPendingCalls bounds the calls a session waits on at once.
	maxPendingCalls = 16
	// answeredMemory is how many finished call ids a session remembers, to tell a late answer (conflict)
	// from one to a call that never was (invalid_argument).
	answeredMemory = 64
)

// Tool call outcomes (the outcome label of warren_agent_tool_calls_total).
const (
	outcomeAnswered  = "answered"
	outcomeError     = "error" // the client answered with isError
	outcomeTimeout   = "timeout"
	outcomeCancelled = "cancelled"
	outcomeRefused   = "refused" // too many calls pending
	outcomeNoHost    = "no_host" // a host tool called while no host is attached
)

// toolMetrics are the hub's tool call metrics.
type toolMetrics struct {
	calls    *prometheus.CounterVec
	latency  prometheus.Histogram
	rejected *prometheus.CounterVec
}

func newToolMetrics(reg prometheus.Registerer) *toolMetrics {
	m := &toolMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_agent_tool_calls_total",
			Help: "Client tool calls by outcome: answered, error (the client's result is an error), timeout, cancelled (the turn ended), refused (too many pending), no_host (a host tool called while no host is attached).",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warren_agent_tool_call_seconds",
			Help:    "Time from a client tool call to its end, whatever the outcome.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 9),
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_agent_tool_results_rejected_total",
			Help: "tool_result messages refused, by error code (malformed, oversize, unknown or already answered call).",
		}, []string{"code"}),
	}
	if reg != nil {
		m.calls = register(reg, m.calls)
		m.latency = register(reg, m.latency)
		m.rejected = register(reg, m.rejected)
	}
	return m
}

// register registers c, or returns the collector already registered under its name (a second hub on
// the same registry, as in tests, counts into the first one's).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// pendingCall is a tool call waiting for its tool_result.
type pendingCall struct {
	id     string
	seq    int64  // the seq of its tool_call message
	frame  []byte // the tool_call message, without seq
	result chan wire.ToolResult
}

// sessionTools is the ToolCaller of one session's turns.
type sessionTools struct {
	h *Hub
	s *conversation
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// CallTool implements ToolCaller.
func (t sessionTools) CallTool(ctx context.Context, call ToolCall) wire.ToolResult {
	h, s := t.h, t.s
	start := time.Now()
	done := func(outcome string) {
		h.tools.calls.WithLabelValues(outcome).Inc()
		h.tools.latency.Observe(time.Since(start).Seconds())
	}
	timeout := call.Timeout
	if timeout <= 0 {
		timeout = h.cfg.ToolTimeout
	}
	pc := &pendingCall{id: newCallID(), result: make(chan wire.ToolResult, 1)}
	pc.frame = wire.ToolCallMessage(wire.ToolCallPayload{
		CallID: pc.id, ToolName: cmp.Or(call.CallName, call.Name), ServerName: call.Server, QualifiedName: call.Name,
		Input: call.Input, ToolUseID: call.ToolUseID, TimeoutMs: timeout.Milliseconds(),
	})
	log := h.log.With("session", s.id, "call", pc.id, "tool", call.Name)

	s.mu.Lock()
	if s.hostTools[call.Name] && !s.hostAttachedLocked() {
		// Nobody could answer before the (long) timeout: the agent is told at once.
		s.mu.Unlock()
		done(outcomeNoHost)
		return wire.ErrorToolResult(call.Name + " runs on the user's machine, and no host is connected to this session (warren possess)")
	}
	if len(s.pending) >= maxPendingCalls {
		s.mu.Unlock()
		done(outcomeRefused)
		return wire.ErrorToolResult("too many client tool calls are pending")
	}
	if s.pending == nil {
		s.pending = make(map[string]*pendingCall)
	}
	s.pending[pc.id] = pc
	if s.state != wire.StateWaitingTool {
		s.state = wire.StateWaitingTool
		s.emitLocked(promptInfo(s.id, wire.StateWaitingTool, s.turnUUID))
	}
	s.emitLocked(pc.frame)
	pc.seq = s.seq
	s.mu.Unlock()
	log.Debug("client tool call sent")

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var outcome string
	select {
	case r := <-pc.result:
		outcome = outcomeAnswered
		if r.IsError {
			outcome = outcomeError
		}
		done(outcome)
		return r
	case <-timer.C:
		outcome = outcomeTimeout
	case <-ctx.Done():
		outcome = outcomeCancelled
	}

	s.mu.Lock()
	if _, ok := s.pending[pc.id]; !ok {
		// Answered while we gave up: the answer wins.
		s.mu.Unlock()
		r := <-pc.result
		done(outcomeAnswered)
		return r
	}
	s.finishCallLocked(pc.id)
	var msg string
	switch outcome {
	case outcomeTimeout:
		msg = "the client did not answer tool call " + pc.id + " (" + call.Name + ") within " + timeout.String()
		s.emitLocked(wire.ErrorMessage(wire.Errorf(wire.Timeout, "%s", msg).
			WithDetails(map[string]any{"callId": pc.id, "toolName": call.Name})))
	default:
		msg = "tool call " + pc.id + " (" + call.Name + ") was cancelled: the turn ended"
	}
	s.mu.Unlock()
	log.Info("client tool call failed", "outcome", outcome)
	done(outcome)
	return wire.ErrorToolResult(msg)
}

// finishCallLocked forgets a pending call, remembers its id, and leaves waiting_tool when it was the
// last one; s.mu is held.
func (s *conversation) finishCallLocked(id string) {
	delete(s.pending, id)
	s.answered = append(s.answered, id)
	if len(s.answered) > answeredMemory {
		s.answered = slices.Delete(s.answered, 0, len(s.answered)-answeredMemory)
	}
	if len(s.pending) == 0 && s.state == wire.StateWaitingTool {
		s.state = wire.StateProcessing
		s.emitLocked(promptInfo(s.id, wire.StateProcessing, s.turnUUID))
	}
}

// toolResult takes a client's tool_result: the first valid answer to a pending call wins. Anything else is
// answered to that client alone with an error (the connection stays open, the call stays pending):
// payload_too_large or invalid_argument for a malformed result, conflict for a call already answered or
// timed out, invalid_argument for a call that is not pending.
func (h *Hub) toolResult(s *conversation, sub *subscriber, payload json.RawMessage) {
	reject := func(e *wire.Error) {
		h.tools.rejected.WithLabelValues(string(e.Code)).Inc()
		s.sendToLocked(sub, wire.ErrorMessage(e))
	}
	p, err := wire.ParseToolResult(payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		pub, _ := wire.Public(err)
		var env struct {
			CallID string `json:"callId"`
		}
		if strictjson.Unmarshal(payload, &env) == nil && wire.ValidCallID(env.CallID) {
			pub = pub.WithDetails(map[string]any{"callId": env.CallID})
		}
		reject(pub)
		return
	}
	pc, ok := s.pending[p.CallID]
	switch {
	case ok:
		pc.result <- p.Result // buffered; only the one who removes the call sends
		s.finishCallLocked(p.CallID)
	case slices.Contains(s.answered, p.CallID):
		reject(wire.Errorf(wire.Conflict, "tool call %s was already answered or has timed out", p.CallID).
			WithDetails(map[string]any{"callId": p.CallID}))
	default:
		reject(wire.Errorf(wire.InvalidArgument, "no tool call %s is pending", p.CallID).
			WithDetails(map[string]any{"callId": p.CallID}))
	}
}

// resendPendingLocked sends a connection that just attached the pending tool calls its attach did not
// replay, so a client that left mid-call and came back can answer them; s.mu is held.
func (s *conversation) resendPendingLocked(sub *subscriber, lastSeq *int64) {
	ids := make([]string, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(s.pending[a].seq, s.pending[b].seq) })
	oldest := s.seq + 1
	if len(s.hist) > 0 {
		oldest = s.hist[0].seq
	}
	for _, id := range ids {
		pc := s.pending[id]
		if lastSeq != nil && pc.seq > *lastSeq && pc.seq >= oldest {
			continue // replayed
		}
		s.sendToLocked(sub, pc.frame)
	}
}
