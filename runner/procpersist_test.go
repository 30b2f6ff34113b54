package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// keptRunner runs a runner of epoch on the sandbox kept in base (its workspace and state directory, where
// the process table is kept without a snapshot store) that sleeps after 300ms idle, a running process
// keeping it awake for at most 500ms. sleep waits for it to sleep.
func keptRunner(t *testing.T, base string, epoch int64) (h *harness, sleep func()) {
	t.Helper()
	requireBwrap(t)
	r, err := runner.New(runner.Config{Issuer: "acme", User: "alice", Epoch: epoch, Listen: "127.0.0.1:0",
		Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Key: "k",
		IdleTimeout: 300 * time.Millisecond, ProcessKeepAwake: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	t.Cleanup(func() {
		cancel()
		if !stopped {
			<-done
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	return &harness{r: r, url: "http://" + r.Addr(), key: "k"}, func() {
		t.Helper()
		select {
		case err := <-done:
			stopped = true
			if err != nil {
				t.Fatalf("Run after sleeping: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the sandbox did not sleep")
		}
	}
}

func (h *harness) listProcs(t *testing.T) []wire.ProcInfo {
	t.Helper()
	var l wire.ProcList
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs", nil), http.StatusOK, &l)
	return l.Procs
}

func (h *harness) procLogs(t *testing.T, id string, off int64) wire.ProcLogs {
	t.Helper()
	var l wire.ProcLogs
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+id+"/logs?offset="+strconv.FormatInt(off, 10), nil), http.StatusOK, &l)
	return l
}

func (h *harness) metric(t *testing.T, line string) bool {
	t.Helper()
	b, _ := io.ReadAll(h.do(t, http.MethodGet, "/metrics", nil).Body)
	return strings.Contains(string(b), line+"\n")
}

// wakeEmptyRunOneAndSleep wakes a runner of epoch that must start with an empty table (the load counted
// as outcome), runs one process to its exit and lets the sandbox sleep.
func wakeEmptyRunOneAndSleep(t *testing.T, base string, epoch int64, outcome string) wire.ProcInfo {
	t.Helper()
	h, sleep := keptRunner(t, base, epoch)
	if procs := h.listProcs(t); len(procs) != 0 {
		t.Fatalf("the table was loaded (%s): %+v", outcome, procs)
	}
	if !h.metric(t, `warren_runner_process_table_loads_total{outcome="`+outcome+`"} 1`) {
		t.Errorf("metrics lack the %s load", outcome)
	}
	p := h.startProc(t, wire.ProcStartRequest{Command: "echo ok"})
	h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	sleep()
	return p
}

func logText(l wire.ProcLogs) string {
	var sb strings.Builder
	for _, c := range l.Chunks {
		sb.WriteString(c.Data)
	}
	return sb.String()
}

// Processes of a sandbox that slept are listed by the sandbox that wakes, as exited, with the tail of their
// logs at the offsets they had; a forget is kept by the next sleep; new processes get other ids.
func TestProcTableKeptAcrossSleep(t *testing.T) {
	base := t.TempDir()
	marker := "kept-" + randomHex(t, 4)
	h, sleep := keptRunner(t, base, 7)
	server := h.startProc(t, wire.ProcStartRequest{Command: "echo up " + marker + "; echo warn >&2; exec sleep 1000"})
	h.waitProc(t, server.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: marker})
	// 200,000 bytes then END: more than the kept tail of one process (64 KiB).
	big := h.startProc(t, wire.ProcStartRequest{Command: "head -c 200000 /dev/zero | tr '\\0' x; echo END; exit 3"})
	bigExit := h.waitProc(t, big.ID, wire.ProcWaitRequest{For: wire.WaitExit}).Proc
	sleep()

	h, sleep = keptRunner(t, base, 8)
	procs := h.listProcs(t)
	if len(procs) != 2 || procs[0].ID != server.ID || procs[1].ID != big.ID {
		t.Fatalf("woken sandbox lists %+v, want %s then %s", procs, server.ID, big.ID)
	}
	s := procs[0]
	if s.Status != wire.ProcExited || s.Ended != "sandbox_stopped" || s.ExitCode == nil || s.EndedAt == "" || s.Command != server.Command || s.StartedAt != server.StartedAt {
		t.Fatalf("the process that ran when the sandbox slept: %+v", s)
	}
	var one wire.ProcInfo
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+s.ID, nil), http.StatusOK, &one)
	if one.ID != s.ID || one.Ended != "sandbox_stopped" || one.LogEnd != s.LogEnd {
		t.Fatalf("GET one: %+v, listed %+v", one, s)
	}
	if l := h.procLogs(t, s.ID, 0); l.Start != 0 || l.Next != s.LogEnd || !strings.Contains(logText(l), "up "+marker+"\n") || !strings.Contains(logText(l), "warn\n") {
		t.Fatalf("logs of the kept process: %+v", l)
	}
	b := procs[1]
	if b.Status != wire.ProcExited || b.Ended != "" || b.ExitCode == nil || *b.ExitCode != 3 || b.LogEnd != bigExit.LogEnd || b.LogEnd != 200004 {
		t.Fatalf("the process that exited by itself: %+v (before the sleep %+v)", b, bigExit)
	}
	if b.LogStart < b.LogEnd-64<<10 || b.LogStart == 0 {
		t.Fatalf("kept log of %d..%d, want the last 64 KiB of %d", b.LogStart, b.LogEnd, b.LogEnd)
	}
	l := h.procLogs(t, b.ID, 0)
	if l.Start != b.LogStart || l.Next != b.LogEnd || len(logText(l)) != int(b.LogEnd-b.LogStart) || !strings.HasSuffix(logText(l), "xxxEND\n") {
		t.Fatalf("logs of the big process: start %d next %d, %d bytes", l.Start, l.Next, len(logText(l)))
	}
	if l := h.procLogs(t, b.ID, b.LogEnd-4); logText(l) != "END\n" || l.Start != b.LogEnd-4 {
		t.Fatalf("logs from an offset: %+v", l)
	}
	// An SSE logs stream of a kept process ends at once with its exit.
	resp := h.do(t, http.MethodGet, "/v1/sandbox/procs/"+s.ID+"/logs", nil, "Accept", "text/event-stream")
	if _, exit := readLogEvents(t, resp.Body); exit.Ended != "sandbox_stopped" {
		t.Fatalf("exit event %+v", exit)
	}
	resp.Body.Close()
	// Waits and signals see an exited process; stdin is refused.
	if w := h.waitProc(t, s.ID, wire.ProcWaitRequest{For: wire.WaitExit}); w.Proc.Status != wire.ProcExited {
		t.Fatalf("wait: %+v", w)
	}
	wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+s.ID+"/wait", wire.ProcWaitRequest{For: wire.WaitPort, Port: 8080}), wire.Conflict)
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+s.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, nil)
	wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/procs/"+s.ID+"/stdin", strings.NewReader("x")), wire.Conflict)
	if !h.metric(t, `warren_runner_process_table_loads_total{outcome="loaded"} 1`) {
		t.Error("metrics lack the load")
	}
	// A new process has its own id; forget the big one.
	n := h.startProc(t, wire.ProcStartRequest{Command: "echo new"})
	if n.ID == s.ID || n.ID == b.ID {
		t.Fatalf("new process id %s collides", n.ID)
	}
	h.waitProc(t, n.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	decode(t, h.do(t, http.MethodDelete, "/v1/sandbox/procs/"+b.ID, nil), http.StatusNoContent, nil)
	sleep()

	h, _ = keptRunner(t, base, 9)
	procs = h.listProcs(t)
	if len(procs) != 2 || procs[0].ID != s.ID || procs[1].ID != n.ID || procs[0].LogEnd != s.LogEnd {
		t.Fatalf("after forgetting %s and sleeping again: %+v", b.ID, procs)
	}
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+b.ID, nil), wire.NotFound)
}

// A runner does not replace the table kept by a newer epoch's runner: the runner it was replaced by.
func TestProcTableFencedRunnerDoesNotWrite(t *testing.T) {
	base := t.TempDir()
	h, sleep := keptRunner(t, base, 8)
	newer := h.startProc(t, wire.ProcStartRequest{Command: "echo newer; exit 0"})
	h.waitProc(t, newer.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	sleep()
	key := filepath.Join(base, "state", "tasks", "local", "procs", "table.json#")
	before, err := os.ReadFile(key)
	if err != nil {
		t.Fatalf("the newer runner kept no table: %v", err)
	}

	// A stale runner (epoch 7) does not load the newer table, and its own is not written.
	wakeEmptyRunOneAndSleep(t, base, 7, "newer_epoch")
	after, err := os.ReadFile(key)
	if err != nil || string(after) != string(before) {
		t.Fatalf("the stale runner replaced the newer table (%v):\n%s", err, after)
	}

	h, _ = keptRunner(t, base, 9)
	if procs := h.listProcs(t); len(procs) != 1 || procs[0].ID != newer.ID {
		t.Fatalf("woken after both: %+v, want only %s", procs, newer.ID)
	}
}

// A corrupt kept table does not stop the wake: the sandbox starts with an empty table, counted, and the
// next sleep replaces the record.
func TestProcTableCorruptRecord(t *testing.T) {
	base := t.TempDir()
	key := filepath.Join(base, "state", "tasks", "local", "procs", "table.json#")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	bad, _ := json.Marshal(map[string]any{"version": 1, "epoch": 1, "procs": []any{map[string]any{
		"info": map[string]any{"id": "../../etc", "command": "x", "status": "exited", "exitCode": 0}}}})
	if err := os.WriteFile(key, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	p := wakeEmptyRunOneAndSleep(t, base, 7, "corrupt")
	h, _ := keptRunner(t, base, 7)
	if procs := h.listProcs(t); len(procs) != 1 || procs[0].ID != p.ID {
		t.Fatalf("after replacing the corrupt record: %+v", procs)
	}
}
