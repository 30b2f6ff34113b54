package devstack_test

import (
	"strings"
	"testing"

	warren "github.com/warren-mesh/warren/sdk"
)

// Interrupt through the Go SDK, as the TypeScript SDK's e2e test does it: a turn running
// `timeout 120 tail -f /dev/null` in the sandbox (the CLI refuses a plain `sleep 120` before running it) is
// interrupted at its first assistant message and ends (with a result or the session ready again,
// well before the command would), and the next turn on the same session completes with the agent's answer,
// not a late result of the interrupted one.
func TestInterruptEndsTheTurnAndTheSessionGoesOn(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := client(t, st, "ivan", withBudget(5_000_000))
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	interrupted := false
	var first []string
	for ev, err := range s.Prompt(ctx, "run timeout 120 tail -f /dev/null") {
		if err != nil {
			t.Fatalf("the interrupted turn: %v (events %v)", err, first)
		}
		first = append(first, brief(ev))
		if _, ok := ev.Assistant(); ok && !interrupted {
			interrupted = true
			if err := s.Interrupt(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !interrupted {
		t.Fatalf("no assistant message in the first turn: %v", first)
	}
	var next []string
	sawAssistant := false
	var res *warren.ResultEvent
	for ev, err := range s.Prompt(ctx, "still here") {
		if err != nil {
			t.Fatalf("the turn after the interrupt: %v (events %v)", err, next)
		}
		next = append(next, brief(ev))
		if _, ok := ev.Assistant(); ok {
			sawAssistant = true
		}
		if r, ok := ev.Result(); ok {
			res = r
		}
	}
	if res == nil || res.IsError || !sawAssistant {
		t.Fatalf("after the interrupt: %s\n(first turn: %s)", strings.Join(next, " "), strings.Join(first, " "))
	}
}

// brief is an event as a word: its type, and a session state or a result's subtype.
func brief(ev warren.Event) string {
	if info, ok := ev.SessionInfo(); ok {
		return string(ev.Type) + ":" + string(info.State)
	}
	if r, ok := ev.Result(); ok {
		return string(ev.Type) + ":" + r.Subtype
	}
	return string(ev.Type)
}
