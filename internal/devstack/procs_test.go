package devstack_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// A background process through the edge, with the SDK: it listens on a port of the sandbox, the wait for
// that port and for a log line answer, stdin reaches it, its logs are followed from an offset over SSE, a
// signal ends it and it is listed with its exit status. It outlives the request that started it.
func TestBackgroundProcessThroughTheEdge(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	sb := client(t, st, "procs").Sandbox()
	const port = 18766
	script := fmt.Sprintf(`$|=1; $SIG{TERM}=sub{ print "got TERM\n"; exit 7 };
my $s=IO::Socket::INET->new(LocalAddr=>"127.0.0.1",LocalPort=>%d,Listen=>5,ReuseAddr=>1) or die "listen: $!";
print "ready on %d\n"; while (my $l = <STDIN>) { print "echo: $l" } sleep 1000;`, port, port)
	p, err := sb.StartProcess(ctx, warren.ProcStartRequest{Command: "perl", Args: []string{"-MIO::Socket::INET", "-e", script}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.WaitProcess(ctx, p.ID, warren.ProcWaitRequest{For: warren.WaitPort, Port: port}); err != nil {
		t.Fatalf("wait for port: %v", err)
	}
	ready, err := sb.WaitProcess(ctx, p.ID, warren.ProcWaitRequest{For: warren.WaitLog, Pattern: `^ready on \d+`, Regex: true})
	if err != nil || ready.Line != fmt.Sprintf("ready on %d", port) {
		t.Fatalf("wait for log: %+v, %v", ready, err)
	}
	if err := sb.WriteStdin(ctx, p.ID, []byte("one\n"), false); err != nil {
		t.Fatal(err)
	}
	echo, err := sb.WaitProcess(ctx, p.ID, warren.ProcWaitRequest{For: warren.WaitLog, Pattern: "echo: one", Offset: ready.Offset})
	if err != nil {
		t.Fatal(err)
	}
	var (
		got  strings.Builder
		exit *warren.ProcInfo
		sent bool
	)
	for ev, err := range sb.FollowProcessLogs(ctx, p.ID, echo.Offset) {
		if err != nil {
			t.Fatalf("follow logs: %v", err)
		}
		if ev.Chunk != nil {
			if got.Len() == 0 && ev.Chunk.Offset != echo.Offset {
				t.Fatalf("first chunk at %d, asked %d", ev.Chunk.Offset, echo.Offset)
			}
			got.WriteString(ev.Chunk.Data)
		}
		if !sent { // the stream is open and has delivered what was there: now end the program
			sent = true
			if _, err := sb.SignalProcess(ctx, p.ID, "TERM"); err != nil {
				t.Fatal(err)
			}
		}
		exit = ev.Exit
	}
	if got.String() != "echo: one\ngot TERM\n" || exit == nil || exit.ExitCode == nil || *exit.ExitCode != 7 {
		t.Fatalf("followed %q, exit %+v", got.String(), exit)
	}
	list, err := sb.Processes(ctx)
	if err != nil || len(list) != 1 || list[0].Status != warren.ProcExited || *list[0].ExitCode != 7 {
		t.Fatalf("processes %+v, %v", list, err)
	}
	if _, err := sb.SignalProcess(ctx, p.ID, "SEGV"); !warren.IsCode(err, wire.InvalidArgument) {
		t.Fatalf("a signal off the list: %v", err)
	}
	if _, err := sb.Process(ctx, "nope"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("unknown process: %v", err)
	}
}

// Two conversations through the edge with the real Claude Code CLI, then the listing: both, with their
// first prompts, times and cost; a live one cannot be deleted; a closed one is deleted, after which it is
// neither listed nor resumable.
func TestSessionListingAndDelete(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := client(t, st, "sessions", withBudget(5_000_000))
	prompts := []string{"first conversation: say hi", "second conversation: say bye"}
	var ids []string
	var live *warren.Session
	for i, p := range prompts {
		s, err := c.Dial(ctx, &warren.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, res := turn(t, ctx, s, p); res.IsError {
			t.Fatalf("turn %q failed: %+v", p, res)
		}
		ids = append(ids, s.ID())
		if i == 0 {
			s.Close()
		} else {
			live = s
		}
	}
	list, err := c.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("sessions %+v, want 2", list)
	}
	byID := map[string]warren.SessionSummary{}
	for _, s := range list {
		byID[s.ID] = s
	}
	for i, id := range ids {
		s, ok := byID[id]
		if !ok || s.FirstPrompt != prompts[i] || s.Created == "" || s.LastTurn < s.Created || s.CostMicros <= 0 {
			t.Fatalf("session %s: %+v (listing %+v)", id, s, list)
		}
		if s.Live != (i == 1) {
			t.Fatalf("session %s live = %v", id, s.Live)
		}
	}
	if err := c.DeleteSession(ctx, ids[1]); !warren.IsCode(err, wire.Conflict) {
		t.Fatalf("deleting the live session: %v", err)
	}
	live.Close()
	if err := c.DeleteSession(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, ids[0]); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("deleting it again: %v", err)
	}
	list, err = c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != ids[1] {
		t.Fatalf("after the delete: %+v, %v", list, err)
	}
	if _, err := c.Dial(ctx, &warren.SessionOptions{SessionID: ids[0]}); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("resuming the deleted session: %v", err)
	}
}
