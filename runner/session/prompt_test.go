package session

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// gateAgent: a "wait" turn runs until release is closed (or it is interrupted); a "fail" turn fails with
// unavailable; any other turn answers at once. runs counts the turns of each prompt text.
type gateAgent struct {
	release chan struct{}
	mu      sync.Mutex
	runs    map[string]int
	total   atomic.Int64
}

func newGateAgent() *gateAgent {
	return &gateAgent{release: make(chan struct{}), runs: make(map[string]int)}
}

func (a *gateAgent) Run(ctx context.Context, turn Turn, emit func([]byte)) error {
	text := string(turn.Message.Message)
	a.mu.Lock()
	a.runs[text]++
	a.mu.Unlock()
	a.total.Add(1)
	switch {
	case strings.Contains(text, "wait"):
		select {
		case <-a.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	case strings.Contains(text, "fail"):
		return wire.Errorf(wire.Unavailable, "the model is down")
	}
	emit([]byte(`{"type":"result","subtype":"success","is_error":false}`))
	return nil
}

// gatedHub is a hub running a gateAgent; release lets its "wait" turns end (also at cleanup).
func gatedHub(t *testing.T) (h *Hub, a *gateAgent, release func()) {
	a = newGateAgent()
	h = newHub(t, Config{Agent: a})
	var once sync.Once
	release = func() { once.Do(func() { close(a.release) }) }
	t.Cleanup(release)
	return h, a, release
}

func userMsg(text, uuid string) string {
	return `{"type":"user","message":{"role":"user","content":"` + text + `"},"uuid":"` + uuid + `"}`
}

// info is the data of a session_info message, nil for anything else.
func info(m map[string]any) map[string]any {
	p := payload(m)
	if m["type"] != wire.TypeControl || p["action"] != wire.ActionSessionInfo {
		return nil
	}
	d, _ := p["data"].(map[string]any)
	return d
}

func details(m map[string]any) map[string]any {
	d, _ := payload(m)["details"].(map[string]any)
	return d
}

// until reads messages until stop says so, returning them all.
func until(t *testing.T, p *pipeConn, stop func(map[string]any) bool) []map[string]any {
	t.Helper()
	var got []map[string]any
	for {
		m := p.recv(t)
		got = append(got, m)
		if stop(m) {
			return got
		}
	}
}

func isInfo(state, uuid string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		d := info(m)
		return d != nil && d["state"] == state && d["uuid"] == uuid
	}
}

// The prompt's uuid is echoed in the session_info processing and ready of its turn and in every error
// about it: the turn's failure, a full queue, and the prompts an interrupt drops before they started.
func TestPromptUUIDEchoedInItsTurnAndErrors(t *testing.T) {
	a := newGateAgent()
	h := newHub(t, Config{Agent: a})
	t.Cleanup(func() { close(a.release) })
	p, _ := serve(t, h)
	p.send(`{"type":"init","payload":{}}`)
	p.recv(t) // session_info initializing
	if d, _ := payload(p.recv(t))["data"].(map[string]any); d["promptUuids"] != true || d["declaredToolNames"] != true {
		t.Fatalf("ready does not say the runner echoes prompt uuids and sends declared tool names: %v", d)
	}
	p.recv(t) // session_info ready

	p.send(userMsg("fail", "u-fail"))
	got := until(t, p, isInfo(wire.StateReady, "u-fail"))
	if d := info(got[0]); d["state"] != wire.StateProcessing || d["uuid"] != "u-fail" {
		t.Fatalf("the turn did not start with processing naming its prompt: %v", got)
	}
	if e := got[1]; e["type"] != wire.TypeError || details(e)["uuid"] != "u-fail" {
		t.Fatalf("the turn's error does not name its prompt: %v", got)
	}

	p.send(userMsg("wait", "u-wait"))
	until(t, p, isInfo(wire.StateProcessing, "u-wait"))
	for i := range maxQueued {
		p.send(userMsg("queued", "u-q"+string(rune('a'+i))))
	}
	p.send(userMsg("one too many", "u-full"))
	e := p.recv(t)
	if e["type"] != wire.TypeError || payload(e)["code"] != string(wire.Conflict) || details(e)["uuid"] != "u-full" {
		t.Fatalf("a full queue's refusal does not name the prompt: %v", e)
	}
	p.send(`{"type":"control","payload":{"action":"interrupt"}}`)
	for i := range maxQueued {
		e := p.recv(t)
		if e["type"] != wire.TypeError || payload(e)["code"] != string(wire.Conflict) || details(e)["uuid"] != "u-q"+string(rune('a'+i)) {
			t.Fatalf("dropped prompt %d: the error does not name it: %v", i, e)
		}
	}
	until(t, p, isInfo(wire.StateReady, "u-wait"))
}

// A prompt sent again with the same uuid (while queued, while running, after it ran) runs once.
func TestPromptSameUUIDRunsOnce(t *testing.T) {
	h, a, release := gatedHub(t)
	p, _ := serve(t, h)
	initSession(t, p, `{}`)
	p.send(userMsg("wait", "u-1"))
	until(t, p, isInfo(wire.StateProcessing, "u-1"))
	p.send(userMsg("wait", "u-1")) // running
	p.send(userMsg("second", "u-2"))
	p.send(userMsg("second", "u-2")) // queued
	release()
	until(t, p, isInfo(wire.StateReady, "u-2"))
	p.send(userMsg("wait", "u-1")) // both ran
	p.send(userMsg("second", "u-2"))
	p.send(`{"type":"ping"}`)
	got := until(t, p, isType(wire.TypePong))
	if len(got) != 1 {
		t.Fatalf("a prompt sent again was answered: %v", got)
	}
	if n := a.total.Load(); n != 2 {
		t.Fatalf("%d turns ran, want 2 (each prompt once): %v", n, a.runs)
	}
}

// A queued prompt whose connection left (a client resuming after a failover) still runs; the client
// that comes back with lastSeq gets its turn, processing naming it through its result.
func TestQueuedPromptRunsAfterItsConnectionLeft(t *testing.T) {
	h, _, release := gatedHub(t)
	p1, wait1 := serve(t, h)
	p1.send(`{"type":"init","payload":{}}`)
	var id string
	for id == "" {
		m := p1.recv(t)
		if d, _ := payload(m)["data"].(map[string]any); payload(m)["action"] == wire.ActionReady {
			id, _ = d["sessionId"].(string)
		}
	}
	p1.send(userMsg("wait", "u-1"))
	got := until(t, p1, isInfo(wire.StateProcessing, "u-1"))
	lastSeq := int64(got[len(got)-1]["seq"].(float64))
	p1.send(userMsg("queued", "u-2"))
	p1.send(`{"type":"ping"}`)
	until(t, p1, isType(wire.TypePong)) // the prompt is queued
	p1.Close(nil)
	wait1()

	p2, _ := serve(t, h)
	p2.send(`{"type":"init","payload":{"sessionId":"` + id + `","lastSeq":` + strconv.FormatInt(lastSeq, 10) + `}}`)
	until(t, p2, isInfo(wire.StateProcessing, "u-1")) // the handshake's session_info
	release()
	until(t, p2, isInfo(wire.StateReady, "u-1"))
	p2.send(`{"type":"ping"}`) // before the fix, the queued prompt was dropped: the pong came next
	m := p2.recv(t)
	if d := info(m); d == nil || d["state"] != wire.StateProcessing || d["uuid"] != "u-2" {
		t.Fatalf("the queued prompt did not run after its connection left: %v", m)
	}
	until(t, p2, isType("result"))
	until(t, p2, isInfo(wire.StateReady, "u-2"))
}
