package session

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// warmAgent records the hub's Warm and Cool calls; its turns block until release is closed.
type warmAgent struct {
	release chan struct{}
	mu      sync.Mutex
	calls   []string
}

func (a *warmAgent) Run(ctx context.Context, _ Turn, _ func([]byte)) error {
	a.record("run")
	select {
	case <-a.release:
	case <-ctx.Done():
	}
	return nil
}

func (a *warmAgent) Warm(id string, _ wire.SessionOptions, meta any) { a.record("warm " + id) }
func (a *warmAgent) Cool(id string)                                  { a.record("cool " + id) }

func (a *warmAgent) record(c string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
}

// waitCalls polls until the agent has seen want, in order.
func (a *warmAgent) waitCalls(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		got := slices.Clone(a.calls)
		a.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls %q, want %q", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWarmAndCool: every attach warms the session (an init, a reconnect), and the session cools only when
// its last client has left and no turn runs: a turn that outlives its client cools it when it ends.
func TestWarmAndCool(t *testing.T) {
	a := &warmAgent{release: make(chan struct{})}
	h := newHub(t, Config{Agent: a})
	p, waitP := serve(t, h)
	initSession(t, p, `{"sessionId":"s"}`)
	a.waitCalls(t, "warm s")

	q, waitQ := serve(t, h)
	attach(t, q, `{"sessionId":"s"}`) // a second client, then the first leaves: still wanted
	p.Close(nil)
	waitP()
	a.waitCalls(t, "warm s", "warm s")

	q.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	q.recv(t) // processing
	a.waitCalls(t, "warm s", "warm s", "run")
	q.Close(nil)
	waitQ()
	a.waitCalls(t, "warm s", "warm s", "run") // the turn still runs
	close(a.release)
	a.waitCalls(t, "warm s", "warm s", "run", "cool s")

	r, _ := serve(t, h)
	attach(t, r, `{"sessionId":"s","lastSeq":0}`) // a reconnect warms it again
	a.waitCalls(t, "warm s", "warm s", "run", "cool s", "warm s")
}
