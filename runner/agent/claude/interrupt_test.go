package claude

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/session"
)

// TestInterruptAsToolStarts: an interrupt that lands as the turn's tool starts (a command that blocks, so
// the timing does not race the turn's end) ends the turn with the CLI's one result; the next turn, started
// at once in the same process, ends at its own successful result, not at a stray result of the
// interrupted one. (The CLI blocks a plain `sleep N` before running it, hence `timeout N tail -f`.)
func TestInterruptAsToolStarts(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	id := session.NewID()
	for i := range 2 { // twice in one process: a result owed by the first round would end the second's turn
		marker := fmt.Sprintf("timeout %d tail -f /dev/null", 3000+100*i+int(time.Now().UnixNano()%100))
		ctx, cancel := context.WithCancel(context.Background())
		watching := make(chan struct{})
		fired := false
		tr := runWatch(t, ctx, d, id, wire.SessionOptions{}, "run "+marker, func(m map[string]any) {
			if m["type"] == "assistant" && !fired {
				fired = true
				go func() { // the interrupt as the tool starts: once its process exists
					defer close(watching)
					waitFor(t, "the tool's process", func() bool { return len(findProcesses(marker)) > 0 })
					cancel()
				}()
			}
		})
		cancel()
		if fired {
			<-watching
		}
		if !errors.Is(tr.err, context.Canceled) {
			t.Fatalf("round %d: the interrupted turn returned %v (%v)", i, tr.err, tr.types())
		}
		if res := tr.result(t); res["is_error"] != true || res["subtype"] != "error_during_execution" {
			t.Fatalf("round %d: the interrupted turn's result %v", i, res)
		}
		if d.pid(id) == 0 {
			t.Fatalf("round %d: the interrupt killed the process; the CLI should have ended the turn itself", i)
		}
		waitFor(t, "the interrupted tool's process to end", func() bool { return len(findProcesses(marker)) == 0 })

		next := run(t, context.Background(), d, id, wire.SessionOptions{}, "still here")
		mustSucceed(t, next)
		if !slices.Contains(next.types(), "assistant") {
			t.Fatalf("round %d: the turn after the interrupt has no answer: %v", i, next.types())
		}
	}
}
