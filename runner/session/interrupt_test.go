package session

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// windDownAgent: a "wait" turn runs until interrupted, emits its result, and then winds down (as the
// Claude Code driver does after the CLI's result) until release is closed; other turns answer at once.
type windDownAgent struct{ release chan struct{} }

func (a windDownAgent) Run(ctx context.Context, turn Turn, emit func([]byte)) error {
	if !strings.Contains(string(turn.Message.Message), "wait") {
		emit([]byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"answered"}]}}`))
		emit([]byte(`{"type":"result","subtype":"success","is_error":false}`))
		return nil
	}
	<-ctx.Done()
	emit([]byte(`{"type":"result","subtype":"error_during_execution","is_error":true}`))
	<-a.release
	return ctx.Err()
}

// An interrupt drops the prompts queued before it, not the one a client sends after seeing the
// interrupted turn's result while that turn is still winding down: that one runs next.
func TestInterruptDropsOnlyThePromptsQueuedBeforeIt(t *testing.T) {
	release := make(chan struct{})
	h := newHub(t, Config{Agent: windDownAgent{release: release}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the hub's Close, which waits for the turn
	p, _ := serve(t, h)
	initSession(t, p, `{}`)
	p.send(`{"type":"user","message":{"role":"user","content":"wait"}}`)
	if d, _ := payload(p.recv(t))["data"].(map[string]any); d["state"] != wire.StateProcessing {
		t.Fatalf("want processing, got %v", d)
	}
	p.send(`{"type":"user","message":{"role":"user","content":"queued before the interrupt"}}`)
	p.send(`{"type":"control","payload":{"action":"interrupt"}}`)
	var got []map[string]any
	errs := 0
	next := func(stop func(m map[string]any) bool) {
		t.Helper()
		for {
			m := p.recv(t)
			got = append(got, m)
			if m["type"] == wire.TypeError {
				if errs++; errs > 1 || payload(m)["code"] != string(wire.Conflict) {
					t.Fatalf("a prompt sent after the interrupt was refused: %v", got)
				}
			}
			if stop(m) {
				return
			}
		}
	}
	next(isType("result")) // the interrupted turn's
	// The client saw the interrupted turn's result and prompts again; the turn has not wound down yet.
	p.send(`{"type":"user","message":{"role":"user","content":"after the interrupt"}}`)
	p.send(`{"type":"ping"}`) // answered once the prompt was taken in
	next(isType(wire.TypePong))
	unblock()
	next(func(m map[string]any) bool { return m["type"] == "result" && m["subtype"] == "success" })
	if errs != 1 {
		t.Fatalf("the prompt queued before the interrupt was not dropped: %v", got)
	}
}
