package warren

// Failover at the unit level: a fake runner session (seq, history, replay after lastSeq, a handshake of
// its own per connection, as runner/session does) behind fake edges, httptest servers at the WebSocket
// boundary. An edge is killed by closing its listener and its connections without a close frame, as a
// dying process's would be. The same property through real edges and a real runner is tested in
// internal/devstack (TestFailoverAcrossEdgesMidTurn).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

type histEntry struct {
	seq   int64
	frame []byte
}

// fakeRunner is one agent session "s1" as a runner holds it.
type fakeRunner struct {
	t       *testing.T
	mu      sync.Mutex
	seq     int64
	started bool
	hist    []histEntry
	subs    map[chan []byte]struct{}
	prompts chan string // the content of every user message, whichever edge it came through
	uuids   chan string // the uuid of every user message, in the same order
	dedupes bool        // ready says promptUuids (the runner dedupes prompts by uuid)
	results chan string // the payload of every tool_result, whichever edge it came through
}

func newFakeRunner(t *testing.T) *fakeRunner {
	return &fakeRunner{t: t, subs: map[chan []byte]struct{}{}, prompts: make(chan string, 16), uuids: make(chan string, 16), results: make(chan string, 16)}
}

// emit records frame with the next seq and sends it to every attached connection.
func (r *fakeRunner) emit(frame string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	f := wire.WithSeq([]byte(frame), r.seq)
	r.hist = append(r.hist, histEntry{r.seq, f})
	for ch := range r.subs {
		ch <- f
	}
	return r.seq
}

// recorded is every recorded message, in order.
func (r *fakeRunner) recorded() []histEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]histEntry(nil), r.hist...)
}

// attach queues the history after lastSeq (minus overlap: a runner replaying too much), then the
// handshake, under one lock as runner/session does.
func (r *fakeRunner) attach(lastSeq *int64, overlap int64, region string) chan []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan []byte, 1024)
	r.subs[ch] = struct{}{}
	if lastSeq != nil {
		for _, e := range r.hist {
			if e.seq > *lastSeq-overlap {
				ch <- e.frame
			}
		}
	}
	next := func(f []byte) { r.seq++; ch <- wire.WithSeq(f, r.seq) }
	if !r.started {
		r.started = true
		next(wire.Control(wire.ActionSessionInfo, map[string]any{"sessionId": "s1", "state": "initializing"}))
	}
	rd := map[string]any{"sessionId": "s1", "region": region, "model": "m1"}
	if r.dedupes {
		rd["promptUuids"] = true
	}
	next(wire.Control(wire.ActionReady, rd))
	next(wire.Control(wire.ActionSessionInfo, map[string]any{"sessionId": "s1", "state": "ready"}))
	return ch
}

func (r *fakeRunner) detach(ch chan []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.subs, ch)
}

// sendTo sends a connection-only frame (a pong, an error about to close it): a seq, not recorded.
func (r *fakeRunner) sendTo(ch chan []byte, f []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	ch <- wire.WithSeq(f, r.seq)
}

// fakeRelay is one fake edge in front of the fake runner.
type fakeRelay struct {
	*httptest.Server
	region  string
	gate    chan struct{} // when set, connections wait until it is closed
	overlap int64         // replay this many seqs before lastSeq
	refuse  *wire.Error   // when set, every upgrade is answered with this HTTP error
	dials   atomic.Int32
	inits   chan map[string]any // the init payload of every connection

	mu    sync.Mutex
	conns []*websocket.Conn
	subs  []chan []byte
}

func (r *fakeRunner) edge(region string, configure func(*fakeRelay)) *fakeRelay {
	t := r.t
	e := &fakeRelay{region: region, inits: make(chan map[string]any, 16)}
	if configure != nil {
		configure(e)
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		e.dials.Add(1)
		if e.gate != nil {
			select {
			case <-e.gate:
			case <-quit:
				return
			}
		}
		if e.refuse != nil {
			wire.WriteHTTPError(w, nil, e.refuse)
			return
		}
		c, err := websocket.Accept(w, req, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer c.CloseNow()
		e.mu.Lock()
		e.conns = append(e.conns, c)
		e.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var init struct {
			Payload map[string]any `json:"payload"`
		}
		_ = json.Unmarshal(b, &init)
		e.inits <- init.Payload
		var opts wire.SessionOptions
		if m, err := wire.ParseClientMessage(b); err != nil {
			t.Errorf("init %s: %v", b, err)
		} else if opts, err = m.Init(); err != nil {
			t.Errorf("init %s: %v", b, err)
		}
		if opts.SessionID != "" && opts.SessionID != "s1" {
			ne := wire.Errorf(wire.NotFound, "no session %s", opts.SessionID)
			_ = c.Write(ctx, websocket.MessageText, wire.WithSeq(wire.ErrorMessage(ne), 1))
			c.Close(websocket.StatusCode(ne.Code.CloseCode()), wire.CloseReason(ne))
			return
		}
		sub := r.attach(opts.LastSeq, e.overlap, e.region)
		defer r.detach(sub)
		e.mu.Lock()
		e.subs = append(e.subs, sub)
		e.mu.Unlock()
		go func() {
			for {
				select {
				case f := <-sub:
					if c.Write(ctx, websocket.MessageText, f) != nil {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var m struct {
				Type    string          `json:"type"`
				Payload json.RawMessage `json:"payload"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				UUID string `json:"uuid"`
			}
			_ = json.Unmarshal(b, &m)
			switch m.Type {
			case "user":
				r.prompts <- m.Message.Content
				r.uuids <- m.UUID
			case "tool_result":
				r.results <- string(m.Payload)
			case "ping":
				r.sendTo(sub, wire.Pong(m.Payload))
			case "control":
				if strings.Contains(string(m.Payload), `"close"`) {
					c.Close(websocket.StatusNormalClosure, "")
					return
				}
			}
		}
	}))
	t.Cleanup(func() {
		close(quit)
		e.kill()
		e.Close()
		wg.Wait()
	})
	return e
}

// kill ends the edge as a crash would: no new connections, the open ones cut without a close frame.
func (e *fakeRelay) kill() {
	e.Listener.Close()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.conns {
		c.CloseNow()
	}
}

// closeWith ends the edge's connections as a draining edge or stopping runner does: an error message with
// a seq of its own, then a close frame with code.
func (e *fakeRelay) closeWith(r *fakeRunner, code websocket.StatusCode, we *wire.Error) {
	e.mu.Lock()
	conns, subs := e.conns, e.subs
	e.mu.Unlock()
	for i, c := range conns {
		r.detach(subs[i])
		r.mu.Lock()
		r.seq++
		f := wire.WithSeq(wire.ErrorMessage(we), r.seq)
		r.mu.Unlock()
		_ = c.Write(context.Background(), websocket.MessageText, f)
		_ = c.Close(code, wire.CloseReason(we))
	}
}

// failoverEvents collects what OnEvent reports.
type failoverEvents chan FailoverEvent

func (ch failoverEvents) next(t *testing.T, kind FailoverKind) FailoverEvent {
	t.Helper()
	for ev := range ch {
		if ev.Kind == kind {
			return ev
		}
		if ev.Kind == FailoverGaveUp {
			t.Fatalf("waiting for %s: %v", kind, ev)
		}
	}
	return FailoverEvent{}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails; nothing is timed
	t.Cleanup(cancel)
	return ctx
}

// drain reads the session to its end and returns the error that ended it (nil for a normal close).
func drain(s *Session) error {
	for _, err := range s.Events() {
		if err != nil {
			return err
		}
	}
	return nil
}

// readUntil reads events until one has seq want.
func readUntil(ctx context.Context, t *testing.T, s *Session, got *[]Event, want int64) {
	t.Helper()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d events: %v", len(*got), err)
		}
		*got = append(*got, ev)
		if ev.Seq == want {
			return
		}
	}
}

func TestFailoverResumesThroughAnotherEdge(t *testing.T) {
	for _, tt := range []struct {
		name    string
		overlap int64 // B's runner replays this many seqs the client already has
		drop    func(r *fakeRunner, a *fakeRelay)
	}{
		{"edge killed", 0, func(r *fakeRunner, a *fakeRelay) { a.kill() }},
		{"runner replays too much", 2, func(r *fakeRunner, a *fakeRelay) { a.kill() }},
		{"edge going away", 0, func(r *fakeRunner, a *fakeRelay) {
			a.closeWith(r, websocket.StatusGoingAway, wire.Errorf(wire.Unavailable, "edge draining"))
		}},
		{"client too slow", 0, func(r *fakeRunner, a *fakeRelay) {
			a.closeWith(r, websocket.StatusTryAgainLater, wire.Errorf(wire.Unavailable, "client too slow; reconnect with lastSeq"))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			r := newFakeRunner(t)
			a := r.edge("ra", nil)
			gate := make(chan struct{})
			b := r.edge("rb", func(e *fakeRelay) { e.gate, e.overlap = gate, tt.overlap })
			events := make(failoverEvents, 16)
			c, err := New(a.URL, "tok", WithFailover(Failover{Edges: []string{b.URL}, MinBackoff: time.Millisecond,
				OnEvent: func(ev FailoverEvent) { events <- ev }}))
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Dial(ctx, &SessionOptions{Model: "m1"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			<-a.inits
			var got []Event
			var last int64
			for i := range 3 {
				last = r.emit(fmt.Sprintf(`{"type":"assistant","n":%d}`, i))
			}
			readUntil(ctx, t, s, &got, last)

			tt.drop(r, a)
			lost := events.next(t, FailoverLost)
			if lost.Edge != a.URL || lost.LastSeq < last {
				t.Fatalf("lost = %+v", lost)
			}
			// The turn goes on while the client is away; B answers only once these are recorded.
			r.emit(`{"type":"assistant","away":true}`)
			// A failed turn's error is recorded: replayed before B's ready, it is an event, not a refusal.
			r.emit(string(wire.ErrorMessage(wire.Errorf(wire.Internal, "internal error"))))
			r.emit(`{"type":"assistant","away":true,"next":true}`)
			close(gate)
			re := events.next(t, FailoverReconnected)
			init := <-b.inits
			if init["sessionId"] != "s1" || init["lastSeq"] != float64(re.LastSeq) || init["model"] != "m1" {
				t.Fatalf("B's init = %v, reconnected = %+v", init, re)
			}
			if re.Edge != b.URL || re.Attempt != 1 || re.LastSeq != lost.LastSeq {
				t.Fatalf("reconnected = %+v after lost %+v", re, lost)
			}
			r.emit(`{"type":"assistant","n":9}`)
			last = r.emit(`{"type":"result","subtype":"success"}`)
			readUntil(ctx, t, s, &got, last)

			// One stream: the first connection's handshake, then every recorded message once, in order.
			var want []int64
			for i := range 3 {
				want = append(want, int64(i+1))
			}
			for _, e := range r.recorded() {
				want = append(want, e.seq)
			}
			var seqs []int64
			for _, ev := range got {
				seqs = append(seqs, ev.Seq)
				if e := ev.Err(); e != nil && e.Code == CodeUnavailable {
					t.Errorf("the error before the close was delivered: %s", ev.Raw)
				}
			}
			if !reflect.DeepEqual(seqs, want) {
				t.Fatalf("delivered seqs %v, want %v", seqs, want)
			}
			for i, e := range r.recorded() {
				if string(got[3+i].Raw) != string(e.frame) {
					t.Fatalf("event %d = %s, want %s", 3+i, got[3+i].Raw, e.frame)
				}
			}
			if s.Edge() != b.URL || s.Region() != "rb" || s.Reconnects() != 1 || s.LastSeq() != last || s.ID() != "s1" {
				t.Fatalf("after failover: edge %s region %s reconnects %d lastSeq %d id %s", s.Edge(), s.Region(), s.Reconnects(), s.LastSeq(), s.ID())
			}
			if err := s.Send(ctx, "next"); err != nil {
				t.Fatal(err)
			}
			if p := <-r.prompts; p != "next" {
				t.Fatalf("prompt %q", p)
			}
			if n := a.dials.Load(); n != 1 {
				t.Fatalf("edge A dialled %d times; the first attempt goes to the next edge", n)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// gatedFailover is a session dialled through edge A of a fake runner, failing over to an edge B whose
// connections wait until gate is closed; events gets what OnEvent reports.
func gatedFailover(ctx context.Context, t *testing.T) (r *fakeRunner, a *fakeRelay, gate chan struct{}, events failoverEvents, s *Session) {
	r = newFakeRunner(t)
	a = r.edge("ra", nil)
	gate = make(chan struct{})
	b := r.edge("rb", func(e *fakeRelay) { e.gate = gate })
	events = make(failoverEvents, 16)
	s, err := Dial(ctx, a.URL, "tok", &DialOptions{Failover: &Failover{Edges: []string{b.URL}, MinBackoff: time.Millisecond,
		OnEvent: func(ev FailoverEvent) { events <- ev }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return r, a, gate, events, s
}

// A send made while the session reconnects waits for the new connection and is delivered there once; one
// whose ctx ends first fails with the ctx's error.
func TestFailoverSendWaitsForReconnect(t *testing.T) {
	ctx := testCtx(t)
	r, a, gate, events, s := gatedFailover(ctx, t)
	a.kill()
	events.next(t, FailoverLost)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Send(cctx, "never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with an ended ctx while reconnecting = %v", err)
	}
	sent := make(chan error, 1)
	go func() { sent <- s.Send(ctx, "hello") }()
	close(gate)
	if err := <-sent; err != nil {
		t.Fatalf("Send during the reconnect = %v", err)
	}
	if p := <-r.prompts; p != "hello" {
		t.Fatalf("prompt %q, want hello", p)
	}
	select {
	case p := <-r.prompts:
		t.Fatalf("a second prompt arrived: %q", p)
	default:
	}
	if _, err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after the reconnect: %v", err)
	}
}

// Final errors end the session as without Failover: no other edge is tried.
func TestFailoverFinalErrorsAreNotRetried(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func(r *fakeRunner, a *fakeRelay)
		code Code // "" for a normal close (io.EOF)
	}{
		{"budget exceeded", func(r *fakeRunner, a *fakeRelay) {
			a.closeWith(r, websocket.StatusCode(wire.BudgetExceeded.CloseCode()), wire.Errorf(wire.BudgetExceeded, "spent"))
		}, CodeBudgetExceeded},
		{"unauthenticated", func(r *fakeRunner, a *fakeRelay) {
			a.closeWith(r, websocket.StatusCode(wire.Unauthenticated.CloseCode()), wire.Errorf(wire.Unauthenticated, "token expired"))
		}, CodeUnauthenticated},
		{"internal", func(r *fakeRunner, a *fakeRelay) {
			a.closeWith(r, websocket.StatusInternalError, wire.Errorf(wire.Internal, "internal error"))
		}, CodeInternal},
		{"normal close", func(r *fakeRunner, a *fakeRelay) {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, c := range a.conns {
				c.Close(websocket.StatusNormalClosure, "")
			}
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			r := newFakeRunner(t)
			a := r.edge("ra", nil)
			b := r.edge("rb", nil)
			var steps atomic.Int32
			s, err := Dial(ctx, a.URL, "tok", &DialOptions{Failover: &Failover{Edges: []string{b.URL},
				OnEvent: func(FailoverEvent) { steps.Add(1) }}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			<-a.inits
			tt.end(r, a)
			end := drain(s)
			if tt.code == "" {
				if end != nil || s.Err() != nil {
					t.Fatalf("normal close: Events ended with %v, Err %v", end, s.Err())
				}
			} else if !IsCode(end, tt.code) || !IsCode(s.Err(), tt.code) {
				t.Fatalf("Events ended with %v, Err %v; want %s", end, s.Err(), tt.code)
			}
			var fe *FailoverError
			if errors.As(end, &fe) {
				t.Fatalf("a final error went through failover: %v", end)
			}
			if b.dials.Load() != 0 || steps.Load() != 0 {
				t.Fatalf("B dialled %d times, %d failover events", b.dials.Load(), steps.Load())
			}
		})
	}
}

// A reconnect attempt answered with a final error ends the failover at once.
func TestFailoverAttemptRefused(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRunner(t)
	a := r.edge("ra", nil)
	b := r.edge("rb", func(e *fakeRelay) { e.refuse = wire.Errorf(wire.Unauthenticated, "token expired") })
	s, err := Dial(ctx, a.URL, "tok", &DialOptions{Failover: &Failover{Edges: []string{b.URL}, MinBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a.kill()
	err = drain(s)
	var fe *FailoverError
	if !errors.As(err, &fe) || fe.Exhausted || fe.Attempts != 1 || !IsCode(err, CodeUnauthenticated) || fe.SessionID != "s1" {
		t.Fatalf("end = %v (%+v), want a FailoverError after 1 attempt wrapping unauthenticated", err, fe)
	}
	if fe.Lost == nil || !strings.Contains(fe.Lost.Error(), "connection lost") {
		t.Fatalf("Lost = %v", fe.Lost)
	}
	if n := b.dials.Load(); n != 1 {
		t.Fatalf("B dialled %d times", n)
	}
	if err := s.Send(ctx, "x"); !errors.As(err, &fe) {
		t.Fatalf("Send after the failover failed = %v", err)
	}
}

// Attempts that keep failing end in a FailoverError that says they ran out, after exactly MaxAttempts,
// alternating between the edges.
func TestFailoverAttemptsExhausted(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRunner(t)
	a := r.edge("ra", nil)
	b := r.edge("rb", func(e *fakeRelay) { e.refuse = wire.Errorf(wire.Unavailable, "no runner") })
	events := make(failoverEvents, 16)
	s, err := Dial(ctx, a.URL, "tok", &DialOptions{Failover: &Failover{Edges: []string{b.URL}, MaxAttempts: 3,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, OnEvent: func(ev FailoverEvent) { events <- ev }}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a.kill()
	end := drain(s)
	var fe *FailoverError
	if !errors.As(end, &fe) || !fe.Exhausted || fe.Attempts != 3 || !IsCode(end, CodeUnavailable) {
		t.Fatalf("end = %v, want an exhausted FailoverError after 3 attempts", end)
	}
	if !strings.Contains(end.Error(), "all 3 reconnect attempts failed") || s.Err() != end {
		t.Fatalf("error %q, Err %v", end, s.Err())
	}
	close(events)
	var tried []string
	for ev := range events {
		if ev.Kind == FailoverRetry {
			tried = append(tried, ev.Edge)
		}
	}
	if want := []string{b.URL, a.URL, b.URL}; !reflect.DeepEqual(tried, want) {
		t.Fatalf("attempts went to %v, want %v", tried, want)
	}
}

// Cancelling Failover.Context, or closing the session, stops reconnecting at once.
func TestFailoverStopsOnCancel(t *testing.T) {
	for _, how := range []string{"context", "close"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t)
			r := newFakeRunner(t)
			a := r.edge("ra", nil)
			b := r.edge("rb", func(e *fakeRelay) { e.refuse = wire.Errorf(wire.Unavailable, "no runner") })
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			retried := make(chan struct{}, 16)
			// An hour between attempts: only the cancellation can end this failover before the test's deadline.
			s, err := Dial(ctx, a.URL, "tok", &DialOptions{Failover: &Failover{Edges: []string{b.URL}, MinBackoff: time.Hour,
				MaxBackoff: time.Hour, Timeout: 2 * time.Hour, Context: fctx,
				OnEvent: func(ev FailoverEvent) {
					if ev.Kind == FailoverRetry {
						retried <- struct{}{}
					}
				}}})
			if err != nil {
				t.Fatal(err)
			}
			a.kill()
			<-retried
			if how == "close" {
				if err := s.Close(); err != nil {
					t.Fatalf("Close while reconnecting = %v", err)
				}
				if s.Err() != nil {
					t.Fatalf("Err after Close = %v", s.Err())
				}
				return
			}
			cancel()
			end := drain(s)
			var fe *FailoverError
			if !errors.As(end, &fe) || !errors.Is(end, context.Canceled) || fe.Attempts != 1 || fe.Exhausted {
				t.Fatalf("end = %v, want a FailoverError wrapping context.Canceled after 1 attempt", end)
			}
			if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
				t.Fatalf("Next after the end = %v", err)
			}
			s.Close()
		})
	}
}

// Without Failover a lost connection ends the session, as before.
func TestNoFailoverByDefault(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRunner(t)
	a := r.edge("ra", nil)
	s, err := Dial(ctx, a.URL, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a.kill()
	end := drain(s)
	var fe *FailoverError
	if end == nil || errors.As(end, &fe) || !strings.Contains(end.Error(), "connection lost") {
		t.Fatalf("end = %v, want connection lost", end)
	}
}

func TestFailoverBackoff(t *testing.T) {
	f := Failover{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for n, want := range map[int]time.Duration{2: 100 * time.Millisecond, 3: 200 * time.Millisecond, 4: 400 * time.Millisecond, 5: 800 * time.Millisecond, 6: time.Second, 20: time.Second} {
		for range 50 {
			if d := f.backoff(n); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

func TestFailoverBadEdge(t *testing.T) {
	c, _ := New("http://127.0.0.1:1", "tok", WithFailover(Failover{Edges: []string{"ftp://x"}}))
	if _, err := c.Dial(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "failover edge") {
		t.Fatalf("Dial with a bad failover edge = %v", err)
	}
}

func TestFailoverEdges(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	probes := []Probe{
		{Region: Region{Name: "far", URL: "https://far", Health: "ok"}, RTTs: ms(90, 80, 100)},
		{Region: Region{Name: "gone", URL: "https://gone", Health: "ok"}, Err: errors.New("refused")},
		{Region: Region{Name: "near", URL: "https://near", Health: "ok"}, RTTs: ms(5, 50, 4)},
		{Region: Region{Name: "leaving", URL: "https://leaving", Health: "draining"}, RTTs: ms(1)},
		{Region: Region{Name: "mid", URL: "https://mid", Health: "ok"}, RTTs: ms(20)},
	}
	if got, want := FailoverEdges(probes), []string{"https://near", "https://mid", "https://far"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("FailoverEdges = %v, want %v", got, want)
	}
	if probes[0].Region.Name != "far" {
		t.Fatal("FailoverEdges reordered its argument")
	}
}

func TestFailoverRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want time.Duration
	}{
		{&Error{Code: CodeRateLimited, Details: map[string]any{"retry_after_seconds": 2.0}}, 2 * time.Second},
		{fmt.Errorf("wrapped: %w", &Error{Code: CodeRateLimited, Details: map[string]any{"retry_after_seconds": 1e9}}), time.Minute},
		{&Error{Code: CodeRateLimited}, 0},
		{&Error{Code: CodeUnavailable, Details: map[string]any{"retry_after_seconds": 2.0}}, 0},
		{errors.New("refused"), 0},
	} {
		if got := retryAfter(tt.err); got != tt.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// A session reached over TLS never fails over to a plain-text edge: the token would travel in the clear.
func TestFailoverKeepsTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "tok", WithHTTPClient(srv.Client()), WithFailover(Failover{Edges: []string{"http://127.0.0.1:1"}}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Dial(testCtx(t), nil)
	if err == nil || !strings.Contains(err.Error(), "not TLS") {
		t.Fatalf("Dial with a plain-text failover edge behind a TLS one: %v, want a refusal", err)
	}
}

// TestFailoverToolCallHandledOnce: after a failover the runner sends the client tool calls still pending
// again, with new seqs (docs/PROTOCOL.md#host-tools). The Session drops a call it delivered already, so
// its handler runs once, and sends its answer again on the new connection (the first may have been lost
// with the old one). Before the fix the handler ran twice.
func TestFailoverToolCallHandledOnce(t *testing.T) {
	ctx := testCtx(t)
	r, a, gate, events, s := gatedFailover(ctx, t)
	runs := map[string]int{}
	srv := &ToolServer{Name: "app", Tools: []Tool{{Name: "lookup", Handler: func(_ context.Context, in json.RawMessage) (ToolResult, error) {
		runs[string(in)]++
		return TextResult("answer " + string(in)), nil
	}}}}
	call := func(id string) string {
		return `{"type":"tool_call","payload":{"callId":"` + id + `","toolName":"mcp__app__lookup","input":{"q":"` + id + `"}}}`
	}
	handle := func(want int64) {
		t.Helper()
		var got []Event
		readUntil(ctx, t, s, &got, want)
		for _, ev := range got {
			if _, err := s.HandleToolCall(ctx, ev, srv); err != nil {
				t.Fatal(err)
			}
		}
	}

	handle(r.emit(call("c1")))
	if res := <-r.results; !strings.Contains(res, `"callId":"c1"`) {
		t.Fatalf("answer through A: %s", res)
	}
	a.kill()
	events.next(t, FailoverLost)
	close(gate)
	events.next(t, FailoverReconnected)
	r.emit(call("c1")) // still pending for the runner: sent again
	r.emit(call("c2"))
	handle(r.emit(`{"type":"result","subtype":"success"}`))

	if runs[`{"q":"c1"}`] != 1 || runs[`{"q":"c2"}`] != 1 {
		t.Fatalf("handler runs %v, want one per call", runs)
	}
	answers := map[string]int{}
	for range 2 {
		res := <-r.results
		for _, id := range []string{"c1", "c2"} {
			if strings.Contains(res, `"callId":"`+id+`"`) && strings.Contains(res, "answer {") {
				answers[id]++
			}
		}
	}
	if answers["c1"] != 1 || answers["c2"] != 1 {
		t.Fatalf("answers through B %v: want c1's sent again and c2's", answers)
	}
}

// TestToolCallsBounded: the callIds a Session remembers and the answers it keeps are bounded.
func TestToolCallsBounded(t *testing.T) {
	var c toolCalls
	for i := range maxDeliveredCalls + 10 {
		id := fmt.Sprint(i)
		if first, _ := c.deliver(id); !first {
			t.Fatalf("call %s seen before", id)
		}
		c.answer(id, toolResultMsg{})
	}
	if len(c.delivered) != maxDeliveredCalls || len(c.order) != maxDeliveredCalls || len(c.answers) != maxKeptAnswers {
		t.Fatalf("%d callIds, %d answers kept", len(c.delivered), len(c.answers))
	}
	last := fmt.Sprint(maxDeliveredCalls + 9)
	if first, a := c.deliver(last); first || a == nil {
		t.Fatalf("repeat of %s: first %v, answer %v", last, first, a)
	}
	if first, _ := c.deliver("0"); !first {
		t.Fatal("the oldest callId is still remembered")
	}
}
