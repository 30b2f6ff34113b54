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

// DialOptions configures the package-level Dial: the session options sent in init, the HTTP client for
// the WebSocket handshake and, when not nil, the Failover policy (see WithFailover).
type DialOptions struct {
	SessionOptions
	HTTPClient *http.Client
	Failover   *Failover
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
	o := []Option{WithHTTPClient(opts.HTTPClient)}
	if opts.Failover != nil {
		o = append(o, WithFailover(*opts.Failover))
	}
	c, err := New(edgeURL, token, o...)
	if err != nil {
		return nil, err
	}
	so := opts.SessionOptions
	return c.Dial(ctx, &so)
}

// Session is one agent channel: a WebSocket to the edge on which prompts go out and the agent's events come
// back. A single goroutine reads the connection: pongs go to the Ping waiting for them, every other message
// is queued for Next and Events. The queue is unbounded so that Ping and Close work whether or not anyone is
// reading events; the server's output per prompt bounds it in practice. With a Failover the same goroutine
// replaces a lost connection (see Failover).
//
// All methods are safe for concurrent use. Events delivered to concurrent readers are each delivered once.
type Session struct {
	client *Client
	opts   SessionOptions // as dialled, for reconnects
	edges  []*Client      // the dialled edge, then the failover's
	id     string
	model  string
	notice string

	stop context.CancelFunc // stops the reader
	done chan struct{}      // closed when the reader has exited; err is final by then

	mu         sync.Mutex
	conn       chanConn
	dead       chan struct{} // closed when conn's reader has ended
	up         chan struct{} // while reconnecting: closed when it ends (connected again or over); else nil
	cur        int           // index in edges of the edge of conn
	region     string
	reconnects int
	queue      []Event
	wake       chan struct{} // closed and replaced whenever queue grows
	err        error         // why the stream ended; nil for a normal close
	errTaken   bool          // err was handed to a reader of the stream
	lastErr    *Error        // the last error message received, to complete a shortened close reason
	lastSeq    int64
	recvSeq    int64 // the largest seq received: a reconnect resumes after it and drops what is not after it
	lastPing   int64
	pings      map[int64]chan time.Time
	closing    bool

	closeOnce sync.Once
	closeErr  error

	calls toolCalls // tool_calls delivered and answered, across reconnects

	unstarted []unstartedPrompt // prompts sent whose turn has not been seen starting (prompt.go); under mu
	dedupes   bool              // the runner of the last ready echoes and dedupes prompt uuids; under mu
}

// Dial opens an agent session: it connects to /ws, sends init with opts (nil for the defaults) and waits
// for the server's ready. An error message or close received before ready is returned as an *Error. ctx
// bounds only the dial and the wait for ready; the session lives until Close or the server ends it.
func (c *Client) Dial(ctx context.Context, opts *SessionOptions) (*Session, error) {
	if opts == nil {
		opts = &SessionOptions{}
	}
	edges, err := c.edgeClients()
	if err != nil {
		return nil, err
	}
	conn, err := c.dialChannel(ctx)
	if err != nil {
		return nil, err
	}
	s := &Session{
		client: c,
		opts:   *opts,
		edges:  edges,
		conn:   conn,
		dead:   make(chan struct{}),
		done:   make(chan struct{}),
		wake:   make(chan struct{}),
		pings:  map[int64]chan time.Time{},
	}
	if opts.LastSeq != nil {
		s.lastSeq, s.recvSeq = *opts.LastSeq, *opts.LastSeq
	}
	if err := s.handshake(ctx, conn, opts, false); err != nil {
		conn.CloseNow()
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.run(rctx)
	return s, nil
}

// dialWS opens the WebSocket to the edge's /ws.
func (c *Client) dialWS(ctx context.Context) (*websocket.Conn, error) {
	conn, err := c.dialWebSocket(ctx, "/ws")
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(wire.MaxFrame)
	return conn, nil
}

// dialWebSocket opens a WebSocket to path with the client's credentials; a refused upgrade is the *Error
// of its answer.
func (c *Client) dialWebSocket(ctx context.Context, path string) (*websocket.Conn, error) {
	h := http.Header{}
	c.header(h)
	conn, resp, err := websocket.Dial(ctx, c.endpoint(path, nil), &websocket.DialOptions{
		HTTPClient: c.hc,
		HTTPHeader: h,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != 0 {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			}
			return nil, wire.ReadHTTPError(resp.StatusCode, body)
		}
		return nil, err
	}
	return conn, nil
}

// handshake sends init on conn and waits for ready.
func (s *Session) handshake(ctx context.Context, conn chanConn, opts *SessionOptions, resumed bool) error {
	b, err := json.Marshal(map[string]any{"type": wire.TypeInit, "payload": opts})
	if err != nil {
		return fmt.Errorf("warren: encode init: %w", err)
	}
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("warren: send init: %w", err)
	}
	return s.awaitReady(ctx, conn, resumed)
}

// Resume reconnects to session sessionID and replays the messages after lastSeq (usually the LastSeq of the
// session that was lost), then the live ones: use it when a connection broke, to pick up the stream where
// it stopped. (With a Failover the session does this itself.)
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

// awaitReady reads until control ready, queueing what comes before it (session_info, replayed events). On a
// failover (resumed) the handshake itself is not queued, only the replayed messages not yet received.
func (s *Session) awaitReady(ctx context.Context, conn chanConn, resumed bool) error {
	s.mu.Lock()
	from := s.recvSeq // the lastSeq sent in init
	s.mu.Unlock()
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				s.mu.Lock()
				prev := s.lastErr
				s.mu.Unlock()
				if e := closeError(int(ce.Code), ce.Reason, prev); e != nil {
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
		// A resume's history may hold a failed turn's error: a refusal has seq 1 (runner) or none (edge).
		replayed := from > 0 && ev.Seq > from
		if e := ev.Err(); e != nil && !replayed {
			return e
		}
		rd, isReady := ev.Ready()
		if resumed {
			if isReady {
				if rd.SessionID != s.id {
					return fmt.Errorf("%w: %q instead of %q", errWrongSession, rd.SessionID, s.id)
				}
				s.mu.Lock()
				s.region, s.dedupes = rd.Region, rd.PromptUUIDs
				s.mu.Unlock()
				return nil
			}
			if info, ok := ev.SessionInfo(); ok && info.State == StateInitializing {
				continue // the handshake of a runner that had lost the session
			}
			s.push(ev, true)
			continue
		}
		s.push(ev, false)
		if isReady {
			s.id, s.region, s.model, s.notice = rd.SessionID, rd.Region, rd.Model, rd.Notice
			s.mu.Lock()
			s.dedupes = rd.PromptUUIDs
			s.mu.Unlock()
			return nil
		}
	}
}

// run reads the session's connection until it ends and, with a Failover, replaces a connection lost for a
// reason that is not final.
func (s *Session) run(ctx context.Context) {
	var end error
	for resumed := false; ; resumed = true {
		s.mu.Lock()
		conn, dead := s.conn, s.dead
		s.mu.Unlock()
		held, retry, err := s.readLoop(ctx, conn, resumed)
		if !retry || s.client.failover == nil || s.isClosing() {
			if held != nil {
				s.push(*held, false)
			}
			end = err
			close(dead)
			break
		}
		s.mu.Lock()
		s.up = make(chan struct{})
		s.mu.Unlock()
		close(dead)
		if end = s.reconnect(ctx, err); end != nil || s.isClosing() {
			if held != nil {
				s.push(*held, false)
			}
			break
		}
	}
	s.mu.Lock()
	s.err = end
	if s.up != nil {
		close(s.up)
		s.up = nil
	}
	s.mu.Unlock()
	close(s.done)
}

// readLoop reads conn until it ends: whether a reconnect may resume the session and the error that ended
// it (nil for a normal close or one we asked for). With a Failover, an unavailable error message is held
// back until the next message shows that the connection goes on (it is then queued, in order) or ends
// (held: queued only if the session ends). resumed: conn replaced a lost one; the first session_info is
// the reconnect's handshake and is dropped.
func (s *Session) readLoop(ctx context.Context, conn chanConn, resumed bool) (held *Event, retry bool, end error) {
	failover := s.client.failover != nil
	first := resumed
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			retry, end = s.readError(err)
			return held, retry, end
		}
		ev, err := decodeEvent(b)
		if err != nil {
			conn.CloseNow()
			return held, false, err
		}
		if ev.Type == wire.TypePong && s.deliverPong(ev) {
			continue
		}
		if first {
			first = false
			if _, ok := ev.SessionInfo(); ok {
				s.seen(ev.Seq)
				s.mu.Lock()
				s.promptSeenLocked(ev) // the turn running now started
				s.mu.Unlock()
				continue
			}
		}
		if held != nil {
			s.push(*held, resumed)
			held = nil
		}
		if e := ev.Err(); failover && e != nil && e.Code == CodeUnavailable {
			s.mu.Lock()
			s.lastErr = e
			s.mu.Unlock()
			held = &ev
			continue
		}
		s.push(ev, resumed)
	}
}

// readError classifies the error that ended the reader: nil for a normal close or one we asked for; retry
// when the session may be resumed on another connection.
func (s *Session) readError(err error) (retry bool, _ error) {
	s.mu.Lock()
	closing, prev := s.closing, s.lastErr
	s.mu.Unlock()
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if e := closeError(int(ce.Code), ce.Reason, prev); e != nil {
			return retryableClose(ce.Code, e), e
		}
		return false, nil
	}
	if closing {
		return false, nil
	}
	if errors.Is(err, io.EOF) {
		// Not the io.EOF of a stream that ended normally (Next, Events).
		return true, fmt.Errorf("warren: connection lost (%v): %w", err, io.ErrUnexpectedEOF)
	}
	return true, fmt.Errorf("warren: connection lost: %w", err)
}

// seen records seq as received.
func (s *Session) seen(seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recvSeq = max(s.recvSeq, seq)
}

// push queues ev. dedup (on a connection that replaced a lost one): a message whose seq is not after the
// last one received was received before, and is dropped.
func (s *Session) push(ev Event, dedup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dedup && ev.Seq > 0 && ev.Seq <= s.recvSeq {
		return
	}
	s.recvSeq = max(s.recvSeq, ev.Seq)
	if s.repeatedToolCall(ev) {
		return // a pending call sent again after a reconnect (tools.go)
	}
	if e := ev.Err(); e != nil {
		s.lastErr = e
	}
	s.promptSeenLocked(ev)
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
	s.recvSeq = max(s.recvSeq, ev.Seq)
	// Nothing before the pong is unread: a resume may start after it.
	if len(s.queue) == 0 && ev.Seq > s.lastSeq {
		s.lastSeq = ev.Seq
	}
	return true
}

// ID is the session id the server assigned (or resumed).
func (s *Session) ID() string { return s.id }

// Region is the region of the edge serving the session (it changes when the session fails over to another
// region).
func (s *Session) Region() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.region
}

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
	UUID            string          `json:"uuid,omitempty"`
}

type userMessageBody struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// Send sends one prompt, with a fresh uuid (docs/PROTOCOL.md#prompt-identity); the agent answers with
// events ending in one result.
func (s *Session) Send(ctx context.Context, prompt string) error {
	_, err := s.sendPrompt(ctx, prompt)
	return err
}

// Prompt sends prompt, with a fresh uuid, when the iteration starts and yields the server's messages until
// its turn ends: up to and including its result. A turn can also end without a result (it was
// interrupted, or the agent failed and the server said so with an error message): the iteration then ends
// after the session_info that reports the session idle again, or yields the error (an *Error) as its last
// element. A failure to send, a stream that ends first (ErrClosed, or the error that closed it) and ctx
// ending are yielded the same way. Cancelling ctx stops the waiting, not the turn: use Interrupt for that.
//
// Messages that arrived before Prompt (the ready that Dial received, the rest of a turn a previous loop
// broke out of) are yielded first and do not end the iteration: a runner that echoes prompt uuids names
// the prompt of each turn in its session_info messages and errors, and an error naming another prompt is
// yielded as an event (type error), not as the iteration's error. With a runner that names none, the turn
// is the one a session_info reports running after the prompt was sent, and a result before it (an
// interrupted turn's late result) does not end the iteration. After a failover reconnect, a prompt whose
// turn had not started is sent again (the runner runs it once).
//
// Breaking out of the loop leaves the rest of the turn queued, and the next Prompt yields it; to abandon a
// turn, Interrupt it and let the loop run to the end.
func (s *Session) Prompt(ctx context.Context, prompt string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		own, err := s.sendPrompt(ctx, prompt)
		if err != nil {
			yield(Event{}, err)
			return
		}
		mine := func(id string) bool { return id == "" || id == own }
		busy := false // a session_info reported this prompt's turn running
		for {
			ev, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("warren: the session ended before the turn did: %w", ErrClosed)
			}
			if err != nil {
				yield(Event{}, err)
				return
			}
			if e := ev.Err(); e != nil && mine(promptOf(ev)) {
				yield(Event{}, e)
				return
			}
			if !yield(ev, nil) {
				return
			}
			// A result before this turn was reported running (an interrupted turn's late result, or an
			// earlier turn's) does not end it, as in the TypeScript SDK.
			if ev.Type == EventResult && busy {
				return
			}
			if info, ok := ev.SessionInfo(); ok {
				switch info.State {
				case StateProcessing, StateWaitingTool:
					busy = mine(info.UUID)
				case StateReady, StateIdle, StateCompleted, StateError:
					if busy && mine(info.UUID) {
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
	if content == nil {
		content = []json.RawMessage{}
	}
	r := toolResultMsg{Content: content, IsError: isError}
	s.calls.answer(callID, r) // sent again if the call comes back after a reconnect
	return s.sendToolResult(ctx, callID, r)
}

func (s *Session) sendToolResult(ctx context.Context, callID string, r toolResultMsg) error {
	return s.write(ctx, map[string]any{
		"type":    wire.TypeToolResult,
		"payload": map[string]any{"callId": callID, "result": r},
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
	dead, err := s.send(ctx, map[string]any{"type": wire.TypePing, "payload": wire.PingPayload{Timestamp: ts}}, true)
	if err != nil {
		return 0, err
	}
	select {
	case t := <-ch:
		return t.Sub(start), nil
	case <-dead:
		if s.client.failover != nil {
			return 0, errors.New("warren: ping: the connection was lost before the pong")
		}
		<-s.done
		return 0, s.ended()
	case <-s.done:
		return 0, s.ended()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Close asks the server to close the session, then closes the connection and waits for the reader. Calling
// it again does nothing and returns the same result. A reconnect in progress is abandoned.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		select {
		case <-s.done:
		default:
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_, err := s.send(ctx, map[string]any{"type": wire.TypeControl, "payload": wire.ControlPayload{Action: wire.ActionClose}}, false)
			cancel()
			var we *Error
			if err != nil && !errors.Is(err, ErrClosed) && !errors.As(err, &we) {
				s.closeErr = err
			}
		}
		s.mu.Lock()
		conn := s.conn
		s.mu.Unlock()
		_ = conn.Close(websocket.StatusNormalClosure, "")
		s.stop()
		<-s.done
	})
	return s.closeErr
}

func (s *Session) control(ctx context.Context, action string) error {
	return s.write(ctx, map[string]any{"type": wire.TypeControl, "payload": wire.ControlPayload{Action: action}})
}

func (s *Session) write(ctx context.Context, v any) error {
	_, err := s.send(ctx, v, true)
	return err
}

// maxSendTries bounds how many connections one send is tried on.
const maxSendTries = 3

// send writes v as one message on the session's connection and returns that connection's dead channel.
// wait: while the session reconnects, wait for the new connection (else fail with ErrClosed); with a
// Failover, a frame that could not be written is tried again on the next connection.
func (s *Session) send(ctx context.Context, v any, wait bool) (<-chan struct{}, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("warren: encode message: %w", err)
	}
	if len(b) > wire.MaxFrame {
		return nil, wire.Errorf(wire.PayloadTooLarge, "message of %d bytes exceeds the %d byte limit", len(b), wire.MaxFrame)
	}
	failover := s.client.failover != nil
	for try := 1; ; try++ {
		conn, dead, err := s.connection(ctx, wait)
		if err != nil {
			return nil, err
		}
		err = conn.Write(ctx, websocket.MessageText, b)
		if err == nil {
			return dead, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !failover || !wait || try == maxSendTries {
			if errors.Is(err, net.ErrClosed) {
				// The connection is gone; the reader is about to report why.
				<-dead
				if !failover {
					<-s.done
					return nil, s.ended()
				}
				if !wait {
					return nil, ErrClosed
				}
			}
			return nil, fmt.Errorf("warren: send: %w", err)
		}
		// The frame did not get through whole, so the server did not act on it: make sure the reader
		// notices the broken connection, and try again on the next one.
		conn.CloseNow()
		select {
		case <-dead:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// connection is the session's current connection; while reconnecting it waits for the next one (wait) or
// fails with ErrClosed.
func (s *Session) connection(ctx context.Context, wait bool) (chanConn, <-chan struct{}, error) {
	for {
		select {
		case <-s.done:
			return nil, nil, s.ended()
		default:
		}
		s.mu.Lock()
		conn, dead, up := s.conn, s.dead, s.up
		s.mu.Unlock()
		if up == nil {
			return conn, dead, nil
		}
		if !wait {
			return nil, nil, ErrClosed
		}
		select {
		case <-up:
		case <-s.done:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
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
