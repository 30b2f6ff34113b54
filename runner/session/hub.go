// Package session serves the agent channel (docs/PROTOCOL.md#agent-channel) of one user's sandbox: the init
// handshake, per-session sequence numbers on every server message, a bounded in-memory history replayed to
// clients that reconnect with lastSeq, ping/pong, turns run by a pluggable Agent, and the calls of client
// tools those turns make (tool_call to the session's clients, the first tool_result back; tools.go), and
// host connections (role host) adding their tools to a session they attach to (session.go).
//
// The package is transport-neutral: a transport that carries whole messages (the runner's WebSocket) is
// adapted to Conn.
package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/wire"
)

// Conn is one client connection carrying whole JSON messages. The hub calls Read from one goroutine and
// Write from another; Close may be called from any goroutine, more than once, and must make a pending Read
// return.
type Conn interface {
	// Read returns the next message; any error ends the connection. A *wire.Error means the client broke
	// the protocol at the transport level (say, a binary frame); it is reported to the client before the
	// connection is closed with its code.
	Read(ctx context.Context) ([]byte, error)
	// Write sends one message.
	Write(ctx context.Context, msg []byte) error
	// Close ends the connection. reason is nil for a normal close, a *wire.Error for a protocol error
	// (the transport maps its code, e.g. to a WebSocket close code), ErrShuttingDown when the runner stops,
	// or another error when the connection failed. Only the first call has an effect.
	Close(reason error) error
}

// Config configures a Hub. Zero values take the documented defaults.
type Config struct {
	// Region is reported in the ready message.
	Region string
	// ReadyExtra is merged into every ready message's data (e.g. a notice that a demo model answers).
	ReadyExtra map[string]any
	// Agent runs turns; nil means NoAgent.
	Agent Agent
	// Logger; nil discards.
	Logger *slog.Logger
	// History is how many messages each session keeps for replay (default 1000).
	History int
	// HistoryBytes caps the bytes of that history (default 16 MiB); the oldest messages go first.
	HistoryBytes int
	// MaxSessions bounds the sessions held in memory (default 64); when full, the least recently attached
	// session with no connection and no running turn is forgotten, and if there is none init fails with
	// unavailable.
	MaxSessions int
	// MaxLive caps the sessions live at once — with a client attached or a turn running — per sandbox,
	// that is per user (default 2). Attaching one more fails with concurrency_limit.
	MaxLive int
	// InitTimeout is how long a new connection may take to send init (default 30s).
	InitTimeout time.Duration
	// ToolTimeout is how long a client tool call waits for its tool_result (default DefaultToolTimeout).
	ToolTimeout time.Duration
	// Metrics, when set, registers the hub's metrics (client tool calls).
	Metrics prometheus.Registerer
}

// errTooSlow closes a connection whose client fell more than its queue behind.
var errTooSlow = wire.Errorf(wire.Unavailable, "client too slow; reconnect with lastSeq")

const (
	writeTimeout = 30 * time.Second
	// checkTimeout bounds the agent's Check of an init (it may ask the CLI which model an alias names).
	checkTimeout = 30 * time.Second
	flushTimeout = 5 * time.Second
	queueSlack   = 256 // queue capacity beyond History: room for live messages after a full replay
)

// Hub holds the sessions of one sandbox and serves connections to them. It is safe for concurrent use.
type Hub struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // lifetime of turns; cancelled by Close, or by Fail with its error as the cause
	cancel context.CancelCauseFunc

	mu       sync.Mutex // guards sessions, tick, closed; taken before any conversation.mu
	sessions map[string]*conversation
	tick     uint64
	closed   bool

	turnMu     sync.Mutex // guards turnClosed, failed and turns.Add; taken after conversation.mu
	turnClosed bool
	failed     *wire.Error // set by Fail: the answer to every prompt from then on
	turns      sync.WaitGroup
	running    atomic.Int64

	tools *toolMetrics
}

// NewHub returns a Hub; Close it to stop its turns.
func NewHub(cfg Config) *Hub {
	if cfg.Agent == nil {
		cfg.Agent = NoAgent{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.History <= 0 {
		cfg.History = 1000
	}
	if cfg.HistoryBytes <= 0 {
		cfg.HistoryBytes = 16 << 20
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 64
	}
	if cfg.MaxLive <= 0 {
		cfg.MaxLive = 2
	}
	if cfg.InitTimeout <= 0 {
		cfg.InitTimeout = 30 * time.Second
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = DefaultToolTimeout
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Hub{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, sessions: make(map[string]*conversation),
		tools: newToolMetrics(cfg.Metrics)}
}

// RunningTurns is the number of turns in progress.
func (h *Hub) RunningTurns() int { return int(h.running.Load()) }

// Close refuses new connections, cancels running turns and waits for them until ctx ends. It is
// idempotent. Connections being served end when the ctx given to Serve ends.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.turnMu.Lock()
	h.turnClosed = true
	h.turnMu.Unlock()
	h.cancel(nil)
	return h.waitTurns(ctx)
}

// waitTurns waits until the running turns have ended or ctx ends; no turn may start any more (turnClosed).
func (h *Hub) waitTurns(ctx context.Context) error {
	done := make(chan struct{})
	go func() { h.turns.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for running turns: %w", ctx.Err())
	}
}

// Fail ends every turn at once with err (a running turn's prompt and every queued one are answered with
// it), answers every prompt from then on with it, and waits until ctx ends for the turns to wind down.
// Connections stay open; once their ctx ends they are closed with ErrShuttingDown wrapping err. The runner
// calls it when the sandbox can no longer run turns (its network died), before it stops.
func (h *Hub) Fail(ctx context.Context, err *wire.Error) error {
	h.turnMu.Lock()
	h.turnClosed, h.failed = true, err
	h.turnMu.Unlock()
	h.cancel(err)
	h.mu.Lock()
	for _, s := range h.sessions {
		s.mu.Lock()
		s.dropQueuedLocked(err)
		s.mu.Unlock()
	}
	h.mu.Unlock()
	return h.waitTurns(ctx)
}

// shutdownReason is what a connection is closed with when its ctx ends: ErrShuttingDown, wrapping Fail's
// error after a Fail.
func (h *Hub) shutdownReason() error {
	h.turnMu.Lock()
	defer h.turnMu.Unlock()
	if h.failed != nil {
		return fmt.Errorf("%w: %w", ErrShuttingDown, h.failed)
	}
	return ErrShuttingDown
}

// Serve runs the agent channel on c until the client closes it, breaks the protocol, or ctx ends (then c
// is closed with ErrShuttingDown). It always closes c and returns the reason it ended: nil for a normal
// close, a *wire.Error for a protocol error, or the transport's or ctx's error.
func (h *Hub) Serve(ctx context.Context, c Conn) error {
	l := &link{shut: make(chan struct{})}
	stop := context.AfterFunc(ctx, func() { h.shutDown(c, l) })
	defer stop()
	reason := h.serve(context.WithoutCancel(ctx), c, l)
	if ctx.Err() != nil {
		reason = h.shutdownReason()
	}
	_ = c.Close(reason)
	return reason
}

// errShutdown is the error message a connection gets before its close when the runner stops
// (docs/PROTOCOL.md#errors: an error precedes every close that ends a turn or a session).
var errShutdown = wire.Errorf(wire.Unavailable, "runner shutting down; reconnect to resume")

// link is how the runner's shutdown reaches one connection: before it is attached to a session the
// shutdown answers it directly (seq 1, as any error before a session); once attached, the shutdown's error
// takes the session's next seq and shut tells the write loop to flush up to it and close.
type link struct {
	mu   sync.Mutex // guards sess, sub and down
	sess *conversation
	sub  *subscriber
	down bool
	shut chan struct{} // closed once, by shutDown, when sess is set
}

// attached records the connection's session; it reports false when the shutdown came first (the
// connection is already closed).
func (l *link) attached(s *conversation, sub *subscriber) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sess, l.sub = s, sub
	return !l.down
}

// shutDown ends c because the runner stops: an error message, then the close (ErrShuttingDown, 1001).
func (h *Hub) shutDown(c Conn, l *link) {
	l.mu.Lock()
	l.down = true
	s, sub := l.sess, l.sub
	l.mu.Unlock()
	why, pub := h.shutdownReason(), errShutdown
	var failed *wire.Error // the hub failed (Fail): its error says why, not a plain shutdown
	if errors.As(why, &failed) {
		pub = failed
	}
	if s == nil {
		h.writeDirect(context.Background(), c, pub)
		_ = c.Close(why)
		return
	}
	s.sendTo(sub, wire.ErrorMessage(pub))
	close(l.shut)
}

// serve uses a context that is never cancelled for I/O: ending a connection goes through Conn.Close so the
// client gets a proper close frame with a code, after an error message saying why.
func (h *Hub) serve(ctx context.Context, c Conn, l *link) error {
	timer := time.AfterFunc(h.cfg.InitTimeout, func() {
		err := wire.Errorf(wire.Timeout, "no init message within %s", h.cfg.InitTimeout)
		h.writeDirect(ctx, c, err)
		_ = c.Close(err)
	})
	b, err := c.Read(ctx)
	timer.Stop()
	if err != nil {
		if isProtocolError(err) {
			h.writeDirect(ctx, c, err)
		}
		return err
	}
	var meta any
	if mc, ok := c.(MetaConn); ok {
		meta = mc.Meta()
	}
	m, err := wire.ParseClientMessage(b)
	var (
		opts    wire.SessionOptions
		checked Checked
	)
	if err == nil {
		opts, err = h.checkInit(m)
	}
	if err == nil {
		checked, err = h.check(ctx, opts, meta)
	}
	var (
		sess *conversation
		sub  *subscriber
	)
	if err == nil {
		sess, sub, err = h.open(opts, func() { _ = c.Close(errTooSlow) })
	}
	if err != nil {
		h.writeDirect(ctx, c, err)
		return err
	}
	sess.mu.Lock()
	sub.meta = meta
	sub.host = opts.Role == wire.RoleHost
	if w, ok := h.cfg.Agent.(Warmer); ok {
		w.Warm(sess.id, sess.opts, meta) // the agent process starts while the client writes its prompt
	}
	sess.mu.Unlock()
	log := h.log.With("session", sess.id)
	defer sess.detach(sub, h.cool)
	if !l.attached(sess, sub) {
		return ErrShuttingDown
	}
	h.handshake(sess, sub, checked.Model, opts.LastSeq)
	log.Debug("agent client attached", "last_seq", opts.LastSeq, "host", opts.Role == wire.RoleHost)

	stopWrite := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.writeLoop(ctx, c, sub, stopWrite, l.shut) })
	reason := h.readLoop(ctx, c, sess, sub)
	close(stopWrite)
	wg.Wait()
	log.Debug("agent client detached", "reason", reason)
	return reason
}

func (h *Hub) checkInit(m wire.ClientMessage) (wire.SessionOptions, error) {
	if m.Type != wire.TypeInit {
		return wire.SessionOptions{}, wire.Errorf(wire.InvalidArgument, "the first message must be init, got %q", m.Type)
	}
	opts, err := m.Init()
	if err != nil {
		return opts, err
	}
	return opts, nil
}

// check asks the agent to validate an init (see Checker). A reconnect to a session the hub holds is
// checked with the options the session runs with, which a reconnect does not change.
func (h *Hub) check(ctx context.Context, opts wire.SessionOptions, meta any) (Checked, error) {
	ck, ok := h.cfg.Agent.(Checker)
	if !ok {
		return Checked{}, nil
	}
	c := Check{Options: opts, Meta: meta}
	if opts.SessionID != "" {
		h.mu.Lock()
		s, open := h.sessions[opts.SessionID]
		h.mu.Unlock()
		c.Open = open
		if open && !opts.ForkSession {
			if opts.ResumeSessionAt != "" {
				return Checked{}, wire.Errorf(wire.InvalidArgument, "session option resumeSessionAt: session %s is already open; it applies when a session is resumed or forked", opts.SessionID)
			}
			s.mu.Lock()
			var err error
			c.Options, err = s.withHostLocked(opts)
			s.mu.Unlock()
			if err != nil {
				return Checked{}, err
			}
			c.Options.ResumeSessionAt = "" // applied when the session was opened
		}
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	return ck.Check(cctx, c)
}

// open finds the session named by opts.SessionID, or creates one (with that id when it is valid,
// otherwise with a new random id), and attaches a subscriber to it, replaying after opts.LastSeq. Both
// happen under the hub's lock so the session cannot be evicted in between.
func (h *Hub) open(opts wire.SessionOptions, onDrop func()) (*conversation, *subscriber, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, wire.Wrap(wire.Unavailable, ErrClosed, "runner shutting down")
	}
	id := opts.SessionID
	if !ValidID(id) || opts.ForkSession || (opts.Continue && opts.SessionID == "") {
		// A fork or a continuation is a new conversation; opts.SessionID stays the source for the agent.
		id = NewID()
	}
	h.tick++
	s, ok := h.sessions[id]
	if !ok || s.idle() {
		live := 0
		for _, o := range h.sessions {
			if o != s && !o.idle() {
				live++
			}
		}
		if live >= h.cfg.MaxLive {
			return nil, nil, wire.Errorf(wire.ConcurrencyLimit, "%d sessions are already live in this sandbox; close one first", live).
				WithDetails(map[string]any{"max_live_sessions": h.cfg.MaxLive})
		}
	}
	if !ok {
		if len(h.sessions) >= h.cfg.MaxSessions && !h.evictLocked() {
			return nil, nil, wire.Errorf(wire.Unavailable, "too many sessions in this sandbox (%d)", h.cfg.MaxSessions)
		}
		s = newConversation(id, opts, h.cfg.History, h.cfg.HistoryBytes)
		s.state = wire.StateInitializing
		h.sessions[id] = s
	} else if opts.Role == wire.RoleHost {
		// A host attaching to an open session adds its tools (checked by check, and again here: another
		// host may have attached meanwhile).
		s.mu.Lock()
		err := s.addHostLocked(opts)
		s.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
	}
	s.used = h.tick
	return s, s.attach(opts.LastSeq, h.cfg.History+queueSlack, onDrop), nil
}

func (h *Hub) evictLocked() bool {
	var victim *conversation
	for _, s := range h.sessions {
		if (victim == nil || s.used < victim.used) && s.idle() {
			victim = s
		}
	}
	if victim == nil {
		return false
	}
	delete(h.sessions, victim.id)
	return true
}

// handshake answers init on this connection: session_info initializing (new sessions only), control ready
// {sessionId, region, model}, then session_info with the session's current state, and the pending tool
// calls the attach did not replay.
func (h *Hub) handshake(s *conversation, sub *subscriber, model string, lastSeq *int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == wire.StateInitializing {
		s.sendToLocked(sub, sessionInfo(s.id, wire.StateInitializing))
		s.state = wire.StateReady
	}
	s.sendToLocked(sub, wire.Control(wire.ActionReady, h.readyData(map[string]any{
		"sessionId": s.id, "region": h.cfg.Region, "model": cmp.Or(model, s.model()),
		"promptUuids": true, // prompt.go: uuids echoed, and prompts deduplicated by them
		// tools.go: tool_call names the tool as its client declared it, with serverName and qualifiedName.
		"declaredToolNames": true,
	})))
	s.sendToLocked(sub, promptInfo(s.id, s.state, s.turnUUID))
	s.resendPendingLocked(sub, lastSeq)
}

// readyData merges ReadyExtra under the handshake's own keys.
func (h *Hub) readyData(d map[string]any) map[string]any {
	for k, v := range h.cfg.ReadyExtra {
		if _, own := d[k]; !own {
			d[k] = v
		}
	}
	return d
}

// writeDirect answers a connection that has no session yet; its seq counter starts at 1.
func (h *Hub) writeDirect(ctx context.Context, c Conn, err error) {
	pub, logIt := wire.Public(err)
	if logIt {
		h.log.Error("agent channel failed", "err", err)
	}
	wctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	_ = c.Write(wctx, wire.WithSeq(wire.ErrorMessage(pub), 1))
}

// writeLoop writes sub's queue to c until stop (the read side ended: flush what is queued) or shut (the
// runner stops: flush, which writes the shutdown's error message, then close with ErrShuttingDown).
func (h *Hub) writeLoop(ctx context.Context, c Conn, sub *subscriber, stop, shut <-chan struct{}) {
	write := func(ctx context.Context, f []byte) bool {
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		defer cancel()
		if err := c.Write(wctx, f); err != nil {
			_ = c.Close(fmt.Errorf("write: %w", err))
			return false
		}
		return true
	}
	flush := func() {
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		defer cancel()
		for {
			select {
			case f := <-sub.ch:
				if !write(fctx, f) {
					return
				}
			default:
				return
			}
		}
	}
	for {
		select {
		case f := <-sub.ch:
			if !write(ctx, f) {
				return
			}
		case <-sub.gone: // the connection is being closed with errTooSlow
			return
		case <-stop:
			flush()
			return
		case <-shut:
			flush()
			_ = c.Close(h.shutdownReason())
			return
		}
	}
}

// readLoop handles client messages until the connection ends; it returns the reason (see Serve).
func (h *Hub) readLoop(ctx context.Context, c Conn, s *conversation, sub *subscriber) error {
	for {
		b, err := c.Read(ctx)
		if err != nil {
			if isProtocolError(err) {
				pub, _ := wire.Public(err)
				s.sendTo(sub, wire.ErrorMessage(pub))
			}
			return err
		}
		m, err := wire.ParseClientMessage(b)
		if err != nil {
			pub, _ := wire.Public(err)
			s.sendTo(sub, wire.ErrorMessage(pub))
			return err
		}
		switch m.Type {
		case wire.TypePing:
			s.sendTo(sub, wire.Pong(m.Payload))
		case wire.TypeInit:
			s.sendTo(sub, wire.ErrorMessage(wire.Errorf(wire.InvalidArgument, "the connection is already initialized")))
		case wire.TypeUser:
			h.startTurn(s, sub, m)
		case wire.TypeToolResult:
			h.toolResult(s, sub, m.Payload)
		case wire.TypeControl:
			cp, _ := m.Control() // validated by ParseClientMessage
			switch cp.Action {
			case wire.ActionClose:
				return nil
			case wire.ActionInterrupt:
				s.interrupt()
			case wire.ActionEndInput:
				// Nothing buffers input yet; accepted for compatibility.
			}
		}
	}
}

// isProtocolError reports whether a Read error is the client's fault (a *wire.Error from the transport,
// such as a binary frame) rather than the connection ending; the client is told before the close.
func isProtocolError(err error) bool {
	var we *wire.Error
	return errors.As(err, &we)
}

// maxQueued bounds the prompts a session holds while a turn runs.
const maxQueued = 8

// startTurn begins a turn, or queues the prompt when one is running (a client may send its next prompt as
// soon as it sees a result, before the agent has wound the turn down; Claude Code queues input the same
// way). A turn emits session_info processing, the agent's events, an error message if it failed, and
// session_info ready, all recorded for replay. A prompt whose uuid the session holds (queued, running or
// among the last ones run) is a client sending it again after a reconnect: it is ignored (prompt.go).
func (h *Hub) startTurn(s *conversation, sub *subscriber, m wire.ClientMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.knowsPromptLocked(m.UUID) {
		h.log.Debug("prompt sent again; ignored", "session", s.id, "uuid", m.UUID)
		return
	}
	if s.turnCancel != nil {
		if len(s.queued) >= maxQueued {
			s.sendToLocked(sub, wire.ErrorMessage(promptError(wire.Errorf(wire.Conflict, "%d prompts are already queued; wait or interrupt", maxQueued), m.UUID)))
			return
		}
		s.rememberPromptLocked(m.UUID)
		s.queued = append(s.queued, queuedTurn{sub: sub, msg: m})
		return
	}
	s.rememberPromptLocked(m.UUID)
	h.beginLocked(s, sub, m)
}

// beginLocked starts a turn; s.mu is held and no turn is running.
func (h *Hub) beginLocked(s *conversation, sub *subscriber, m wire.ClientMessage) {
	h.turnMu.Lock()
	defer h.turnMu.Unlock()
	if h.turnClosed {
		err := h.failed
		if err == nil {
			err = wire.Errorf(wire.Unavailable, "runner shutting down")
		}
		s.answerPromptLocked(sub, m.UUID, err)
		s.dropQueuedLocked(err)
		return
	}
	ctx, cancel := context.WithCancel(h.ctx)
	s.turnCancel = cancel
	s.turnUUID = m.UUID
	s.state = wire.StateProcessing
	s.emitLocked(promptInfo(s.id, wire.StateProcessing, m.UUID))
	h.turns.Add(1)
	h.running.Add(1)
	turn := Turn{SessionID: s.id, Options: s.opts, Message: m, Meta: sub.meta, Tools: sessionTools{h: h, s: s}}
	go h.runTurn(ctx, s, turn)
}

// cool tells a Warmer agent that a session has no connection and no turn; the session's lock is held.
func (h *Hub) cool(id string) {
	if w, ok := h.cfg.Agent.(Warmer); ok {
		w.Cool(id)
	}
}

// dropQueuedLocked answers every queued prompt with err (each prompt gets an answer: a result or an error;
// answerPromptLocked says to whom) and empties the queue.
func (s *conversation) dropQueuedLocked(err *wire.Error) {
	for _, q := range s.queued {
		s.answerPromptLocked(q.sub, q.msg.UUID, err)
	}
	s.queued = nil
}

type queuedTurn struct {
	sub *subscriber
	msg wire.ClientMessage
}

func (h *Hub) runTurn(ctx context.Context, s *conversation, turn Turn) {
	defer h.turns.Done()
	defer h.running.Add(-1)
	var done atomic.Bool
	err := h.cfg.Agent.Run(ctx, turn, func(ev []byte) {
		if done.Load() {
			return
		}
		if !isObject(ev) {
			h.log.Warn("agent emitted a non-object event; dropped", "session", s.id, "bytes", len(ev))
			return
		}
		s.emit(ev)
	})
	done.Store(true)

	s.mu.Lock()
	defer s.mu.Unlock()
	interrupted := ctx.Err() != nil && errors.Is(err, context.Canceled)
	var failed *wire.Error
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &failed) { // Fail cut the turn short
		err, interrupted = failed, false
	}
	s.turnCancel()
	s.turnCancel = nil
	id := s.turnUUID
	s.turnUUID = ""
	if err != nil && !interrupted {
		pub, logIt := wire.Public(err)
		if logIt {
			h.log.Error("agent turn failed", "session", s.id, "uuid", id, "err", err)
		}
		s.emitLocked(wire.ErrorMessage(promptError(pub, id)))
	}
	s.state = wire.StateReady
	s.emitLocked(promptInfo(s.id, wire.StateReady, id))
	if len(s.queued) == 0 && len(s.subs) == 0 {
		h.cool(s.id) // the turn outlived its clients
	}
	if len(s.queued) > 0 {
		// The next prompt runs even when the connection that sent it has left (a client resuming after a
		// failover, or one dropped for reading too slowly): its turn is recorded like any other and
		// replayed to the client that comes back with lastSeq.
		next := s.queued[0]
		s.queued = s.queued[1:]
		h.beginLocked(s, next.sub, next.msg)
	}
}
