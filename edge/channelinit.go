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

// firstMessages waits, at most Config.InitTimeout, for what opens the channel and returns the messages the
// runner is sent first (docs/PROTOCOL.md#client-messages). Nothing is admitted, leased or started before:
// a client that never sends init costs no sandbox.
//
//   - init: sent as it came.
//   - a user message naming its session_id, first: a client reconnecting without init (the Chucky
//     SDK's autoReconnect sends the prompts it queued while disconnected, and never init again). It
//     attaches to that session, as init {"sessionId": S} would (the runner answers not_found for a
//     session it does not know), then the prompt follows.
//   - ping: answered with pong (no seq), and the wait goes on.
//   - control close: the channel ends normally.
//   - any other message (a tool_result, an interrupt, a user message without session_id): answered with
//     an invalid_argument error naming what opens a channel, and the wait goes on; the connection is not
//     closed at once, since a client that reconnects on every close would come straight back.
//
// A malformed message ends the channel as it would later (error message, then its close code).
func (e *Edge) firstMessages(ctx context.Context, c msgConn) ([][]byte, error) {
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
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return nil, e.readFailed(ctx, c, err, end)
		}
		if typ != websocket.MessageText {
			return nil, e.endWith(ctx, c, end, wire.Errorf(wire.InvalidArgument, "binary frames are not part of the protocol; send JSON text frames"))
		}
		m, perr := wire.ParseClientMessage(data)
		if perr != nil {
			return nil, e.endWith(ctx, c, end, perr)
		}
		var first [][]byte
		switch {
		case m.Type == wire.TypeInit:
			first = [][]byte{data}
		case m.Type == wire.TypeUser && m.SessionID != "":
			init, err := resumeInit(m.SessionID)
			if err != nil {
				return nil, e.endWith(ctx, c, end, err)
			}
			first = [][]byte{init, data}
		case m.Type == wire.TypePing:
			_ = writeClient(ctx, c, websocket.MessageText, wire.Pong(m.Payload))
			continue
		case m.Type == wire.TypeControl && isClose(m):
			end(func() { _ = c.Close(websocket.StatusNormalClosure, "") })
			return nil, errChannelEnded
		default:
			_ = writeClient(ctx, c, websocket.MessageText, wire.ErrorMessage(wire.Errorf(wire.InvalidArgument,
				"the first message must be init, got %q", m.Type)))
			continue
		}
		if !end(func() {}) {
			return nil, errChannelEnded
		}
		return first, nil
	}
}

// resumeInit is the init a reconnect without one stands for: attach to session id.
func resumeInit(id string) ([]byte, error) {
	payload, _ := json.Marshal(map[string]string{"sessionId": id})
	b, _ := json.Marshal(map[string]any{"type": wire.TypeInit, "payload": json.RawMessage(payload)})
	if _, err := wire.ParseClientMessage(b); err != nil {
		return nil, err
	}
	return b, nil
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
