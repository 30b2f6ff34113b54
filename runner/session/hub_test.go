package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

var errPipeClosed = errors.New("pipe closed")

// pipeConn is an in-memory transport: the test plays the client on the other end.
type pipeConn struct {
	in     chan []byte // client → hub
	out    chan []byte // hub → client, unbuffered: a client that does not read blocks the hub's writer
	closed chan struct{}
	once   sync.Once
	reason error
}

func newPipe() *pipeConn {
	return &pipeConn{in: make(chan []byte, 16), out: make(chan []byte), closed: make(chan struct{})}
}

func (p *pipeConn) Read(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.in:
		return b, nil
	case <-p.closed:
		return nil, errPipeClosed
	}
}

func (p *pipeConn) Write(ctx context.Context, b []byte) error {
	select {
	case p.out <- b:
		return nil
	case <-p.closed:
		return errPipeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipeConn) Close(reason error) error {
	p.once.Do(func() { p.reason = reason; close(p.closed) })
	return nil
}

func (p *pipeConn) send(msg string) { p.in <- []byte(msg) }

func (p *pipeConn) recv(t testing.TB) map[string]any {
	t.Helper()
	select {
	case b := <-p.out:
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	case <-p.closed:
		t.Fatalf("closed: %v", p.reason)
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	return nil
}

// serve runs hub.Serve on a new pipe; wait returns Serve's result (and may be called repeatedly).
func serve(t testing.TB, h *Hub) (p *pipeConn, wait func() error) {
	t.Helper()
	p = newPipe()
	done := make(chan struct{})
	var err error
	go func() { err = h.Serve(context.Background(), p); close(done) }()
	wait = func() error {
		select {
		case <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return")
			return nil
		}
	}
	t.Cleanup(func() {
		p.Close(nil)
		wait()
	})
	return p, wait
}

func initSession(t testing.TB, p *pipeConn, payload string) {
	t.Helper()
	p.send(`{"type":"init","payload":` + payload + `}`)
	for i := 0; i < 3; i++ {
		p.recv(t)
	}
}

// countingAgent emits n events per turn.
type countingAgent struct{ n int }

func (a countingAgent) Run(_ context.Context, _ Turn, emit func([]byte)) error {
	for i := range a.n {
		emit([]byte(fmt.Sprintf(`{"type":"stream_event","i":%d}`, i)))
	}
	return nil
}

func newHub(t testing.TB, cfg Config) *Hub {
	h := NewHub(cfg)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func TestHistoryIsBounded(t *testing.T) {
	h := newHub(t, Config{Agent: countingAgent{n: 10}, History: 5})
	p, _ := serve(t, h)
	initSession(t, p, `{"sessionId":"s"}`)
	p.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	for range 12 { // processing, 10 events, ready
		p.recv(t)
	}
	p.Close(nil)

	q, _ := serve(t, h)
	q.send(`{"type":"init","payload":{"sessionId":"s","lastSeq":0}}`)
	// Seqs 4..15 were broadcast; only the last 5 (11..15) are kept.
	for want := 11.0; want <= 15; want++ {
		if m := q.recv(t); m["seq"] != want {
			t.Fatalf("replayed seq %v, want %v", m["seq"], want)
		}
	}
	if m := q.recv(t); m["seq"] != 16.0 || m["type"] != "control" {
		t.Fatalf("after replay: %v", m)
	}
}

func TestSessionLimitEvictsIdle(t *testing.T) {
	h := newHub(t, Config{MaxSessions: 1})
	a, waitA := serve(t, h)
	initSession(t, a, `{"sessionId":"a"}`)
	a.send(`{"type":"control","payload":{"action":"close"}}`)
	if err := waitA(); err != nil {
		t.Fatalf("normal close returned %v", err)
	}

	b, _ := serve(t, h)
	initSession(t, b, `{"sessionId":"b"}`) // evicts a, which is idle

	c, waitC := serve(t, h)
	c.send(`{"type":"init","payload":{"sessionId":"c"}}`)
	if m := c.recv(t); m["type"] != "error" {
		t.Fatalf("got %v, want an error: b is attached and cannot be evicted", m)
	}
	if err := waitC(); wire.CodeOf(err) != wire.Unavailable {
		t.Fatalf("Serve = %v, want unavailable", err)
	}
}

func TestSlowClientIsDropped(t *testing.T) {
	h := newHub(t, Config{Agent: countingAgent{n: 2000}, History: 10})
	p, wait := serve(t, h)
	initSession(t, p, `{}`)
	p.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	// Never read: the queue (History+256) overflows and the hub gives up on this client.
	if err := wait(); !errors.Is(err, errPipeClosed) {
		t.Fatalf("Serve = %v, want the transport's error after the hub closed it", err)
	}
	if wire.CodeOf(p.reason) != wire.Unavailable {
		t.Fatalf("close reason %v, want unavailable", p.reason)
	}
}

func TestInitTimeout(t *testing.T) {
	h := newHub(t, Config{InitTimeout: 50 * time.Millisecond})
	p, wait := serve(t, h)
	wait()
	if wire.CodeOf(p.reason) != wire.Timeout {
		t.Fatalf("close reason %v, want timeout", p.reason)
	}
}

type blockingAgent struct{ started chan struct{} }

func (a blockingAgent) Run(ctx context.Context, _ Turn, _ func([]byte)) error {
	close(a.started)
	<-ctx.Done()
	return ctx.Err()
}

func TestCloseCancelsTurnsAndServe(t *testing.T) {
	started := make(chan struct{})
	h := NewHub(Config{Agent: blockingAgent{started: started}})
	ctx, cancel := context.WithCancel(context.Background())
	p := newPipe()
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, p) }()
	p.send(`{"type":"init"}`)
	go func() { // a reader, so the hub's writer is never stuck
		for {
			select {
			case <-p.out:
			case <-p.closed:
				return
			}
		}
	}()
	p.send(`{"type":"user","message":{"role":"user","content":"x"}}`)
	<-started
	if h.RunningTurns() != 1 {
		t.Fatalf("RunningTurns = %d", h.RunningTurns())
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrShuttingDown) || !errors.Is(p.reason, ErrShuttingDown) {
		t.Fatalf("Serve = %v, close reason %v; want ErrShuttingDown", err, p.reason)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := h.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if h.RunningTurns() != 0 {
		t.Fatalf("RunningTurns = %d after Close", h.RunningTurns())
	}
	q := newPipe()
	q.send(`{"type":"init"}`)
	go func() { <-q.out }()
	if err := h.Serve(context.Background(), q); wire.CodeOf(err) != wire.Unavailable {
		t.Fatalf("Serve after Close = %v, want unavailable", err)
	}
}

func TestIDs(t *testing.T) {
	for id, ok := range map[string]bool{
		"a": true, "A-b-9": true, NewID(): true, string(make([]byte, 64)): false,
		"": false, "a b": false, "a_b": false, "é": false,
	} {
		if ValidID(id) != ok {
			t.Errorf("ValidID(%q) = %v", id, !ok)
		}
	}
	if a, b := NewID(), NewID(); a == b || len(a) != 36 || a[14] != '4' {
		t.Fatalf("NewID: %q %q", a, b)
	}
}

// checkingAgent implements Checker: it records each Check and answers with model or err.
type checkingAgent struct {
	countingAgent
	mu     sync.Mutex
	checks []Check
	model  string
	err    error
}

func (a *checkingAgent) Check(_ context.Context, c Check) (Checked, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checks = append(a.checks, c)
	return Checked{Model: a.model}, a.err
}

// TestCheckBeforeReady: the agent validates every init before ready; a refusal is the init's answer (no
// session is created) and ready names the model the agent reports.
func TestCheckBeforeReady(t *testing.T) {
	a := &checkingAgent{countingAgent: countingAgent{n: 1}, err: wire.Errorf(wire.NotFound, "session s1 not found")}
	h := newHub(t, Config{Agent: a})
	p, wait := serve(t, h)
	p.send(`{"type":"init","payload":{"sessionId":"s1"}}`)
	if m := p.recv(t); m["type"] != "error" || m["payload"].(map[string]any)["code"] != "not_found" {
		t.Fatalf("refused init answered %v", m)
	}
	if err := wait(); wire.CodeOf(err) != wire.NotFound {
		t.Fatalf("Serve = %v", err)
	}
	if len(h.sessions) != 0 {
		t.Fatalf("a refused init created a session")
	}

	a.err, a.model = nil, "claude-resolved-1"
	p, _ = serve(t, h)
	p.send(`{"type":"init","payload":{"model":"alias"}}`)
	p.recv(t) // initializing
	ready := p.recv(t)
	data := ready["payload"].(map[string]any)["data"].(map[string]any)
	if data["model"] != "claude-resolved-1" {
		t.Fatalf("ready %v: want the agent's model", data)
	}
	id := data["sessionId"].(string)
	p.recv(t)

	// A reconnect is checked with the session's own options and marked open; resumeSessionAt cannot
	// apply to a session that is already open.
	p2, wait2 := serve(t, h)
	p2.send(`{"type":"init","payload":{"sessionId":"` + id + `","model":"other"}}`)
	p2.recv(t)
	p2.recv(t)
	a.mu.Lock()
	last := a.checks[len(a.checks)-1]
	a.mu.Unlock()
	if !last.Open || last.Options.Model != "alias" {
		t.Fatalf("reconnect checked with %+v", last)
	}
	p3, wait3 := serve(t, h)
	p3.send(`{"type":"init","payload":{"sessionId":"` + id + `","resumeSessionAt":"0b7e5cbe-6c2f-4a5e-9d5e-3f1f1b2a7c01"}}`)
	if m := p3.recv(t); m["type"] != "error" {
		t.Fatalf("resumeSessionAt on an open session answered %v", m)
	}
	if err := wait3(); wire.CodeOf(err) != wire.InvalidArgument {
		t.Fatalf("Serve = %v", err)
	}
	p2.Close(nil)
	wait2()
}

// A client's lastSeq ahead of the session moves its seq on (a runner that restarted), but not past
// MaxResumeSeq: a huge one cannot make seq overflow.
func TestResumeSeqIsBounded(t *testing.T) {
	for _, tc := range []struct {
		last, want int64
	}{{10, 11}, {MaxResumeSeq, MaxResumeSeq + 1}, {MaxResumeSeq + 1, 1}, {1<<63 - 1, 1}} {
		s := newConversation("s", wire.SessionOptions{}, 10, 1<<20)
		last := tc.last
		sub := s.attach(&last, 4, func() {})
		s.emit([]byte(`{"type":"x"}`))
		var got struct {
			Seq int64 `json:"seq"`
		}
		if err := json.Unmarshal(<-sub.ch, &got); err != nil {
			t.Fatal(err)
		}
		if got.Seq != tc.want {
			t.Errorf("lastSeq %d: next seq %d, want %d", tc.last, got.Seq, tc.want)
		}
	}
}

// drain reads p's messages until it is closed and returns them; the hub's writer is never stuck.
func drain(p *pipeConn) <-chan []map[string]any {
	out := make(chan []map[string]any, 1)
	go func() {
		var got []map[string]any
		for {
			select {
			case b := <-p.out:
				var m map[string]any
				_ = json.Unmarshal(b, &m)
				got = append(got, m)
			case <-p.closed:
				out <- got
				return
			}
		}
	}()
	return out
}

// TestShutdownSendsErrorBeforeClose: a runner stopping mid-turn, or before a connection has sent init,
// sends an error message (unavailable) and only then closes with ErrShuttingDown (1001); the error of an
// attached connection takes the session's next seq (docs/PROTOCOL.md#errors). Before the fix the
// connection was closed with no error message, and the Chucky SDK's stream() waited forever.
func TestShutdownSendsErrorBeforeClose(t *testing.T) {
	for _, attached := range []bool{true, false} {
		t.Run(fmt.Sprintf("attached=%v", attached), func(t *testing.T) {
			started := make(chan struct{})
			h := newHub(t, Config{Agent: blockingAgent{started: started}})
			ctx, cancel := context.WithCancel(context.Background())
			p := newPipe()
			done := make(chan error, 1)
			go func() { done <- h.Serve(ctx, p) }()
			msgs := drain(p)
			if attached {
				p.send(`{"type":"init"}`)
				p.send(`{"type":"user","message":{"role":"user","content":"x"},"uuid":"u1"}`)
				<-started
			}
			cancel()
			if err := <-done; !errors.Is(err, ErrShuttingDown) || !errors.Is(p.reason, ErrShuttingDown) {
				t.Fatalf("Serve = %v, close reason %v; want ErrShuttingDown", err, p.reason)
			}
			got := <-msgs
			if len(got) == 0 {
				t.Fatal("closed with no message")
			}
			last := got[len(got)-1]
			payload, _ := last["payload"].(map[string]any)
			if last["type"] != "error" || payload["code"] != "unavailable" {
				t.Fatalf("last message before the close = %v, want an unavailable error", last)
			}
			var prev float64
			for _, m := range got[:len(got)-1] {
				prev = max(prev, m["seq"].(float64))
			}
			if want := prev + 1; last["seq"] != want {
				t.Fatalf("error seq = %v, want %v (after %d messages)", last["seq"], want, len(got)-1)
			}
		})
	}
}

// TestInitTimeoutSendsErrorBeforeClose: a connection that sends no init gets a timeout error message,
// then the close with the timeout code (4504), instead of a bare close.
func TestInitTimeoutSendsErrorBeforeClose(t *testing.T) {
	h := newHub(t, Config{InitTimeout: 10 * time.Millisecond})
	p := newPipe()
	done := make(chan error, 1)
	go func() { done <- h.Serve(context.Background(), p) }()
	msgs := drain(p)
	<-done
	got := <-msgs
	if len(got) != 1 || got[0]["type"] != "error" || got[0]["payload"].(map[string]any)["code"] != "timeout" {
		t.Fatalf("messages before the close = %v, want one timeout error", got)
	}
	if wire.CodeOf(p.reason) != wire.Timeout {
		t.Fatalf("close reason %v, want timeout", p.reason)
	}
}
