package edge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// MaxWaitingChannelsPerUser bounds a user's agent channels that are authenticated but have not sent init
// yet: no rate, lease or session cap counts them (nothing is admitted before init), so without it one token
// could hold any number of connections, their goroutines and buffers, for InitTimeout each. It is above a
// legitimate burst (an app opening dozens of clients of one user at once, each sending init as soon as it
// is connected: TestConcurrentConnectsStartOneRunner dials 50) and bounds a hostile token all the same.
const MaxWaitingChannelsPerUser = 64

// waitingInit counts each user's channels waiting for init. The zero value is ready.
type waitingInit struct {
	mu sync.Mutex
	n  map[admissionKey]int
}

// take counts one more waiting channel of k, or refuses it (concurrency_limit) when k has
// MaxWaitingChannelsPerUser already. release, called once, uncounts it.
func (w *waitingInit) take(k admissionKey) (release func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[k] >= MaxWaitingChannelsPerUser {
		return nil, wire.Errorf(wire.ConcurrencyLimit, "too many agent channels of this user waiting for init (at most %d); send init or close one",
			MaxWaitingChannelsPerUser).WithDetails(map[string]any{"max_waiting_channels": MaxWaitingChannelsPerUser})
	}
	if w.n == nil {
		w.n = map[admissionKey]int{}
	}
	w.n[k]++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.n[k]--; w.n[k] <= 0 {
				delete(w.n, k)
			}
		})
	}, nil
}

// errChannelEnded: the channel ended while the edge waited for its first message (the client left, or
// the edge closed it with an error message already: the init timeout, its shutdown).
var errChannelEnded = errors.New("agent channel ended before init")

// opening is how an agent channel opens: the messages the runner is sent first, the client connection to
// relay (c, or c with a read under way when the edge resumed a channel that sent nothing), and the tool
// calls the client had before (a reconnect without init: resume.go).
type opening struct {
	first  [][]byte
	conn   msgConn
	known  []string
	prompt bool   // first ends with a prompt (a reconnect's user message)
	orphan string // the lost session the edge resumed a channel that sent nothing into
}

// firstMessages waits, at most Config.InitTimeout, for what opens the channel of user k and returns the
// messages the runner is sent first (docs/PROTOCOL.md#opening). Nothing is admitted, leased or started
// before: a client that never sends init costs no sandbox.
//
//   - init: sent as it came.
//   - a reconnect without init (the Chucky SDK's autoReconnect never sends init again): a user message
//     naming its session_id, or a tool_result answering a tool call this edge delivered to one of k's
//     sessions, first. It attaches to that session, as init {"sessionId": S, "lastSeq": n} would, n what
//     this edge delivered of S (resume.go; no lastSeq when it knows nothing of S), then the message
//     follows. The runner answers not_found for a session it does not know.
//   - nothing for Config.ReconnectGrace (or a multiple of it), while k has exactly one session whose
//     client was lost (its channel ended without the client closing it): a reconnect without init that
//     has nothing to send yet, attached to that session the same way.
//   - ping: answered with pong (no seq), and the wait goes on.
//   - control close: the channel ends normally.
//   - any other message (a tool_result for no call this edge knows, an interrupt, a user message without
//     session_id): answered with an invalid_argument error naming what opens a channel, and the wait goes
//     on; the connection is not closed at once, since a client that reconnects on every close would come
//     straight back.
//
// A malformed message ends the channel as it would later (error message, then its close code).
func (e *Edge) firstMessages(ctx context.Context, c msgConn, k admissionKey) (opening, error) {
	var (
		mu   sync.Mutex
		over bool // the wait is over: a message was taken, or the edge closed the channel
	)
	end := func(f func()) bool {
		mu.Lock()
		defer mu.Unlock()
		if over {
			return false
		}
		over = true
		f()
		return true
	}
	timer := time.AfterFunc(e.cfg.InitTimeout, func() {
		end(func() { e.closeWith(ctx, c, wire.Errorf(wire.Timeout, "no init message within %s", e.cfg.InitTimeout)) })
	})
	defer timer.Stop()
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		select {
		case <-e.stopping:
			end(func() { e.closeGoingAway(c) })
		case <-waited:
		}
	}()
	grace := time.NewTimer(e.cfg.ReconnectGrace)
	defer grace.Stop()
	reads := make(chan clientRead, 1)
	for {
		go func() {
			typ, data, err := c.Read(ctx)
			reads <- clientRead{typ, data, err}
		}()
		var r clientRead
	wait:
		for {
			select {
			case r = <-reads:
				break wait
			case <-grace.C:
				p, ok := e.resumes.orphan(k)
				if !ok {
					// Again later: the edge may not have seen the client's old connection go yet.
					grace.Reset(e.cfg.ReconnectGrace)
					continue
				}
				init, err := resumeInit(p)
				if err != nil || !end(func() {}) {
					return opening{}, errChannelEnded
				}
				return opening{first: [][]byte{init}, conn: &readingConn{msgConn: c, next: reads}, known: p.calls, orphan: p.session}, nil
			}
		}
		op, done, err := e.firstMessage(ctx, c, k, end, r)
		if !done {
			continue
		}
		return op, err
	}
}

// clientRead is one read of the client connection.
type clientRead struct {
	typ  websocket.MessageType
	data []byte
	err  error
}

// firstMessage takes one message read while the channel waits to open: done reports that the wait is over
// (with the opening, or the error that ended the channel).
func (e *Edge) firstMessage(ctx context.Context, c msgConn, k admissionKey, end func(func()) bool, r clientRead) (opening, bool, error) {
	if r.err != nil {
		return opening{}, true, e.readFailed(ctx, c, r.err, end)
	}
	if r.typ != websocket.MessageText {
		return opening{}, true, e.endWith(ctx, c, end, wire.Errorf(wire.InvalidArgument, "binary frames are not part of the protocol; send JSON text frames"))
	}
	m, perr := wire.ParseClientMessage(r.data)
	if perr != nil {
		return opening{}, true, e.endWith(ctx, c, end, perr)
	}
	var (
		p  resumePoint
		ok bool
	)
	switch {
	case m.Type == wire.TypeInit:
		if !end(func() {}) {
			return opening{}, true, errChannelEnded
		}
		return opening{first: [][]byte{r.data}, conn: c}, true, nil
	case m.Type == wire.TypeUser && m.SessionID != "":
		p, ok = e.resumes.point(k, m.SessionID), true
	case m.Type == wire.TypeToolResult:
		p, ok = e.resumes.byCall(k, toolResultCall(m))
	case m.Type == wire.TypePing:
		_ = writeClient(ctx, c, websocket.MessageText, wire.Pong(m.Payload))
		return opening{}, false, nil
	case m.Type == wire.TypeControl && isClose(m):
		end(func() { _ = c.Close(websocket.StatusNormalClosure, "") })
		return opening{}, true, errChannelEnded
	}
	if !ok {
		_ = writeClient(ctx, c, websocket.MessageText, wire.ErrorMessage(wire.Errorf(wire.InvalidArgument,
			"the first message must be init, got %q", m.Type)))
		return opening{}, false, nil
	}
	init, err := resumeInit(p)
	if err != nil {
		return opening{}, true, e.endWith(ctx, c, end, err)
	}
	if !end(func() {}) {
		return opening{}, true, errChannelEnded
	}
	return opening{first: [][]byte{init, r.data}, conn: c, known: p.calls, prompt: m.Type == wire.TypeUser}, true, nil
}

// toolResultCall is the callId a tool_result answers ("" when it names none).
func toolResultCall(m wire.ClientMessage) string {
	var p struct {
		CallID string `json:"callId"`
	}
	_ = json.Unmarshal(m.Payload, &p)
	return p.CallID
}

// resumeInit is the init a reconnect without one stands for: attach to p's session after its lastSeq.
func resumeInit(p resumePoint) ([]byte, error) {
	payload, _ := json.Marshal(struct {
		SessionID string `json:"sessionId"`
		LastSeq   *int64 `json:"lastSeq,omitempty"`
	}{p.session, p.lastSeq})
	b, _ := json.Marshal(map[string]any{"type": wire.TypeInit, "payload": json.RawMessage(payload)})
	if _, err := wire.ParseClientMessage(b); err != nil {
		return nil, err
	}
	return b, nil
}

// readingConn is a client connection with one read under way (started while the channel waited to open):
// its first Read takes that read's result.
type readingConn struct {
	msgConn
	next chan clientRead // the read under way; nil once taken
}

func (c *readingConn) Read(ctx context.Context) (websocket.MessageType, []byte, error) {
	if c.next == nil {
		return c.msgConn.Read(ctx)
	}
	select {
	case r := <-c.next:
		c.next = nil
		return r.typ, r.data, r.err
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
}

// pingerOf is c's pinger, seen through a readingConn.
func pingerOf(c msgConn) (pinger, bool) {
	if rc, ok := c.(*readingConn); ok {
		c = rc.msgConn
	}
	p, ok := c.(pinger)
	return p, ok
}

func isClose(m wire.ClientMessage) bool {
	cp, err := m.Control()
	return err == nil && cp.Action == wire.ActionClose
}

// endWith ends the channel with err (error message, then its close) unless the edge already closed it.
func (e *Edge) endWith(ctx context.Context, c msgConn, end func(func()) bool, err error) error {
	end(func() { e.closeWith(ctx, c, err) })
	return errChannelEnded
}

// readFailed ends the wait after a failed read: a frame too large or malformed is answered as the relay
// answers it; a client gone, or a channel the edge closed itself, is just over.
func (e *Edge) readFailed(ctx context.Context, c msgConn, err error, end func(func()) bool) error {
	var bad *wire.Error
	switch {
	case websocket.CloseStatus(err) == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig):
		return e.endWith(ctx, c, end, wire.Errorf(wire.PayloadTooLarge, "frame exceeds %d bytes", wire.MaxFrame))
	case errors.As(err, &bad):
		return e.endWith(ctx, c, end, bad)
	}
	end(func() {})
	return errChannelEnded
}
