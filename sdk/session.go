package warren

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// closeTimeout bounds how long Close spends telling the server goodbye.
const closeTimeout = 5 * time.Second

// DialOptions configures the package-level Dial: the session options sent in init, and the HTTP client for
// the WebSocket handshake.
type DialOptions struct {
	SessionOptions
	HTTPClient *http.Client
}

// Dial connects to the edge at edgeURL (its base URL, or the full ws(s)://.../ws or .../ws/ URL) with token and opens
// an agent session. It is New followed by Client.Dial.
func Dial(ctx context.Context, edgeURL, token string, opts *DialOptions) (*Session, error) {
	if opts == nil {
		opts = &DialOptions{}
	}
	if u, err := url.Parse(edgeURL); err == nil && strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/ws") {
		u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/ws")
		edgeURL = u.String()
	}
	c, err := New(edgeURL, token, WithHTTPClient(opts.HTTPClient))
	if err != nil {
		return nil, err
	}
	so := opts.SessionOptions
	return c.Dial(ctx, &so)
}

// Session is one agent channel: a WebSocket to the edge on which prompts go out and the agent's events come
// back. A single goroutine reads the connection: pongs go to the Ping waiting for them, every other message
// is queued for Next and Events. The queue is unbounded so that Ping and Close work whether or not anyone is
// reading events; the server's output per prompt bounds it in practice.
//
// All methods are safe for concurrent use. Events delivered to concurrent readers are each delivered once.
type Session struct {
	conn   *websocket.Conn
	id     string
	region string
	model  string
	notice string

	stop context.CancelFunc // stops the reader
	done chan struct{}      // closed when the reader has exited; err is final by then

	mu       sync.Mutex
	queue    []Event
	wake     chan struct{} // closed and replaced whenever queue grows
	err      error         // why the stream ended; nil for a normal close
	errTaken bool          // err was handed to a reader of the stream
	lastErr  *Error        // the last error message received, to complete a shortened close reason
	lastSeq  int64
	lastPing int64
	pings    map[int64]chan time.Time
	closing  bool

	closeOnce sync.Once
	closeErr  error
}

// Dial opens an agent session: it connects to /ws, sends init with opts (nil for the defaults) and waits
// for the server's ready. An error message or close received before ready is returned as an *Error. ctx
// bounds only the dial and the wait for ready; the session lives until Close or the server ends it.
func (c *Client) Dial(ctx context.Context, opts *SessionOptions) (*Session, error) {
	if opts == nil {
		opts = &SessionOptions{}
	}
	h := http.Header{}
	c.header(h)
	conn, resp, err := websocket.Dial(ctx, c.endpoint("/ws", nil), &websocket.DialOptions{
		HTTPClient: c.hc,
		HTTPHeader: h,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != 0 {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(resp.Body)
			}
			return nil, wire.ReadHTTPError(resp.StatusCode, body)
		}
		return nil, err
	}
	conn.SetReadLimit(wire.MaxFrame)

	s := &Session{
		conn:  conn,
		done:  make(chan struct{}),
		wake:  make(chan struct{}),
		pings: map[int64]chan time.Time{},
	}
	if opts.LastSeq != nil {
		s.lastSeq = *opts.LastSeq
	}
	if err := s.write(ctx, map[string]any{"type": wire.TypeInit, "payload": opts}); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("warren: send init: %w", err)
	}
	if err := s.awaitReady(ctx); err != nil {
		conn.CloseNow()
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.readLoop(rctx)
	return s, nil
}

// Resume reconnects to session sessionID and replays the messages after lastSeq (usually the LastSeq of the
// session that was lost), then the live ones: use it when a connection broke, to pick up the stream where
// it stopped.
//
// To go on with an earlier conversation without replaying it, Dial with its id instead:
//
//	s, err := c.Dial(ctx, &warren.SessionOptions{SessionID: id})
//
// With ForkSession set as well the conversation continues under a new session id and the original stays
// as it was; with Continue (and no SessionID) the user's most recent session is resumed.
func (c *Client) Resume(ctx context.Context, sessionID string, lastSeq int64) (*Session, error) {
	return c.Dial(ctx, &SessionOptions{SessionID: sessionID, LastSeq: &lastSeq})
}

// awaitReady reads until control ready, queueing what comes before it (session_info, replayed events).
func (s *Session) awaitReady(ctx context.Context) error {
	for {
		_, b, err := s.conn.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				if e := closeError(int(ce.Code), ce.Reason, s.lastErr); e != nil {
					return e
				}
				return fmt.Errorf("warren: the server closed the channel before the session was ready: %w", io.ErrUnexpectedEOF)
			}
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("warren: waiting for the session to be ready: %w", err)
		}
		ev, err := decodeEvent(b)
		if err != nil {
			return err
		}
		if e := ev.Err(); e != nil {
			return e
		}
		s.push(ev)
		if rd, ok := ev.Ready(); ok {
			s.id, s.region, s.model, s.notice = rd.SessionID, rd.Region, rd.Model, rd.Notice
			return nil
		}
	}
}

func (s *Session) readLoop(ctx context.Context) {
	var end error
	for {
		_, b, err := s.conn.Read(ctx)
		if err != nil {
			end = s.readError(err)
			break
		}
		ev, err := decodeEvent(b)
		if err != nil {
			end = err
			s.conn.CloseNow()
			break
		}
		if ev.Type == wire.TypePong && s.deliverPong(ev) {
			continue
		}
		s.push(ev)
	}
	s.mu.Lock()
	s.err = end
	s.mu.Unlock()
	close(s.done)
}

// readError classifies the error that ended the reader: nil for a normal close or one we asked for.
func (s *Session) readError(err error) error {
	s.mu.Lock()
	closing, prev := s.closing, s.lastErr
	s.mu.Unlock()
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if e := closeError(int(ce.Code), ce.Reason, prev); e != nil {
			return e
		}
		return nil
	}
	if closing {
		return nil
	}
	return fmt.Errorf("warren: connection lost: %w", err)
}

func (s *Session) push(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := ev.Err(); e != nil {
		s.lastErr = e
	}
	s.queue = append(s.queue, ev)
	close(s.wake)
	s.wake = make(chan struct{})
}

// deliverPong hands a pong to the Ping waiting for it; false when none is (the pong is then an event).
func (s *Session) deliverPong(ev Event) bool {
	var p struct {
		Payload wire.PingPayload `json:"payload"`
	}
	if json.Unmarshal(ev.Raw, &p) != nil {
		return false
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.pings[p.Payload.Timestamp]
	if !ok {
		return false
	}
	delete(s.pings, p.Payload.Timestamp)
	ch <- now
	// Nothing before the pong is unread: a resume may start after it.
	if len(s.queue) == 0 && ev.Seq > s.lastSeq {
		s.lastSeq = ev.Seq
	}
	return true
}

// ID is the session id the server assigned (or resumed).
func (s *Session) ID() string { return s.id }

// Region is the region of the edge serving the session.
func (s *Session) Region() string { return s.region }

// Model is the model the session runs.
func (s *Session) Model() string { return s.model }

// Notice is what the platform asked to tell the user at ready ("" if nothing), e.g. that a scripted demo
// model answers.
func (s *Session) Notice() string { return s.notice }

// LastSeq is the seq of the last event handed out by Next or Events (or of a pong answering Ping when no
// event was waiting): pass it to Client.Resume after a lost connection to receive what came after.
func (s *Session) LastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeq
}

// Err is the error that ended the session: nil while it is open and after a normal close.
func (s *Session) Err() error {
	select {
	case <-s.done:
	default:
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Next returns the next server message. When the stream has ended it returns io.EOF after a normal close;
// after an error close it returns that error (an *Error when the server sent it) once, then io.EOF.
func (s *Session) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
			if ev.Seq > 0 {
				s.lastSeq = ev.Seq
			}
			s.mu.Unlock()
			return ev, nil
		}
		select {
		case <-s.done:
			err := s.err
			if err == nil || s.errTaken {
				err = io.EOF
			}
			s.errTaken = true
			s.mu.Unlock()
			return Event{}, err
		default:
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-s.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Events yields every server message in order, starting with those that arrived before ready (the ready
// control itself included), until the stream ends. A normal close ends the iteration; an error close yields
// the error once. Breaking out of the loop leaves the remaining messages for the next Next or Events.
func (s *Session) Events() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			ev, err := s.Next(context.Background())
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(Event{}, err)
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// userMessage is a prompt in the shape of docs/PROTOCOL.md#client-messages (parent_tool_use_id is an explicit
// null).
type userMessage struct {
	Type            string          `json:"type"`
	SessionID       string          `json:"session_id"`
	Message         userMessageBody `json:"message"`
	ParentToolUseID *string         `json:"parent_tool_use_id"`
}

type userMessageBody struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// Send sends one prompt; the agent answers with events ending in one result.
func (s *Session) Send(ctx context.Context, prompt string) error {
	return s.write(ctx, userMessage{
		Type:      wire.TypeUser,
		SessionID: s.id,
		Message:   userMessageBody{Role: "user", Content: prompt},
	})
}

// Prompt sends prompt when the iteration starts and yields the server's messages until the turn ends:
// up to and including the next result. A turn can also end without a result (it was interrupted, or the
// agent failed and the server said so with an error message): the iteration then ends after the
// session_info that reports the session idle again, or yields the error (an *Error) as its last element.
// A failure to send, a stream that ends first (ErrClosed, or the error that closed it) and ctx ending
// are yielded the same way. Cancelling ctx stops the waiting, not the turn: use Interrupt for that.
//
// Messages that arrived before Prompt (the ready that Dial received, say) are yielded first. Breaking
// out of the loop leaves the rest of the turn queued, and the next Prompt yields it, ending at its result;
// to abandon a turn, Interrupt it and let the loop run to the end.
func (s *Session) Prompt(ctx context.Context, prompt string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if err := s.Send(ctx, prompt); err != nil {
			yield(Event{}, err)
			return
		}
		busy := false // a session_info reported the turn running
		for {
			ev, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("warren: the session ended before the turn did: %w", ErrClosed)
			}
			if err != nil {
				yield(Event{}, err)
				return
			}
			if e := ev.Err(); e != nil {
				yield(Event{}, e)
				return
			}
			if !yield(ev, nil) || ev.Type == EventResult {
				return
			}
			if info, ok := ev.SessionInfo(); ok {
				switch info.State {
				case StateProcessing, StateWaitingTool:
					busy = true
				case StateReady, StateIdle, StateCompleted, StateError:
					if busy {
						return
					}
				}
			}
		}
	}
}

// SendMessage sends v, encoded as JSON, as one message (content blocks, uuid, anything the protocol allows).
func (s *Session) SendMessage(ctx context.Context, v any) error {
	return s.write(ctx, v)
}

// Interrupt stops the running turn.
func (s *Session) Interrupt(ctx context.Context) error {
	return s.control(ctx, wire.ActionInterrupt)
}

// EndInput tells the server no more prompts will come; the session ends after the running turn.
func (s *Session) EndInput(ctx context.Context) error {
	return s.control(ctx, wire.ActionEndInput)
}

// SendToolResult answers a tool_call. content holds MCP content blocks such as
// {"type":"text","text":"..."}.
func (s *Session) SendToolResult(ctx context.Context, callID string, content []json.RawMessage, isError bool) error {
	type result struct {
		Content []json.RawMessage `json:"content"`
		IsError bool              `json:"isError,omitempty"`
	}
	if content == nil {
		content = []json.RawMessage{}
	}
	return s.write(ctx, map[string]any{
		"type": wire.TypeToolResult,
		"payload": map[string]any{
			"callId": callID,
			"result": result{Content: content, IsError: isError},
		},
	})
}

// Ping measures the round trip to the server. It works whether or not Events is being iterated.
func (s *Session) Ping(ctx context.Context) (time.Duration, error) {
	ch := make(chan time.Time, 1)
	start := time.Now()
	s.mu.Lock()
	ts := start.UnixMilli()
	if ts <= s.lastPing {
		ts = s.lastPing + 1
	}
	s.lastPing = ts
	s.pings[ts] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pings, ts)
		s.mu.Unlock()
	}()
	if err := s.write(ctx, map[string]any{"type": wire.TypePing, "payload": wire.PingPayload{Timestamp: ts}}); err != nil {
		return 0, err
	}
	select {
	case t := <-ch:
		return t.Sub(start), nil
	case <-s.done:
		return 0, s.ended()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Close asks the server to close the session, then closes the connection and waits for the reader. Calling
// it again does nothing and returns the same result.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		select {
		case <-s.done:
		default:
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			err := s.control(ctx, wire.ActionClose)
			cancel()
			var we *Error
			if err != nil && !errors.Is(err, ErrClosed) && !errors.As(err, &we) {
				s.closeErr = err
			}
		}
		_ = s.conn.Close(websocket.StatusNormalClosure, "")
		s.stop()
		<-s.done
	})
	return s.closeErr
}

func (s *Session) control(ctx context.Context, action string) error {
	return s.write(ctx, map[string]any{"type": wire.TypeControl, "payload": wire.ControlPayload{Action: action}})
}

func (s *Session) write(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("warren: encode message: %w", err)
	}
	if len(b) > wire.MaxFrame {
		return wire.Errorf(wire.PayloadTooLarge, "message of %d bytes exceeds the %d byte limit", len(b), wire.MaxFrame)
	}
	if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.stop != nil && errors.Is(err, net.ErrClosed) {
			// The connection is gone; the reader is about to report why.
			<-s.done
			return s.ended()
		}
		return fmt.Errorf("warren: send: %w", err)
	}
	return nil
}

// ended is the error for an operation on a session whose stream is over.
func (s *Session) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return ErrClosed
}
