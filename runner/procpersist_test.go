package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// keptRunner runs a runner of epoch on the sandbox kept in base (its workspace and state directory, where
// the process table is kept without a snapshot store) that sleeps after 300ms idle, a running process
// keeping it awake for at most 500ms. sleep waits for it to sleep.
func keptRunner(t *testing.T, base string, epoch int64, mods ...func(*runner.Config)) (h *harness, sleep func()) {
	t.Helper()
	requireBwrap(t)
	cfg := runner.Config{Issuer: "acme", User: "alice", Epoch: epoch, Listen: "127.0.0.1:0",
		Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Key: "k",
		IdleTimeout: 300 * time.Millisecond, ProcessKeepAwake: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, m := range mods {
		m(&cfg)
	}
	r, err := runner.New(cfg)
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

// runToExitAndSleep wakes a runner of epoch, runs command to its exit and lets the sandbox sleep.
func runToExitAndSleep(t *testing.T, base string, epoch int64, command string) wire.ProcInfo {
	t.Helper()
	h, sleep := keptRunner(t, base, epoch)
	p := h.startProc(t, wire.ProcStartRequest{Command: command})
	h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	sleep()
	return p
}

// keptKey is the file of the kept table in the directory store of a runner without snapshots.
func keptKey(base string) string {
	return filepath.Join(base, "state", "tasks", "local", "procs", "table.json#")
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
	newer := runToExitAndSleep(t, base, 8, "echo newer; exit 0")
	key := keptKey(base)
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

	h, _ := keptRunner(t, base, 9)
	if procs := h.listProcs(t); len(procs) != 1 || procs[0].ID != newer.ID {
		t.Fatalf("woken after both: %+v, want only %s", procs, newer.ID)
	}
}

// A runner whose final snapshot is fenced (a newer epoch's runner committed one since) writes no table,
// even where no record stands in its way.
func TestProcTableSnapshotFencedRunnerDoesNotWrite(t *testing.T) {
	blobs := t.TempDir()
	store, err := blobfs.New(blobs)
	if err != nil {
		t.Fatal(err)
	}
	shared := func(c *runner.Config) { c.Snapshots, c.SnapshotPrefix = store, "sandboxes/alice" }
	// The stale runner's process keeps it awake until the test kills it.
	stale, sleepStale := keptRunner(t, t.TempDir(), 7, shared, func(c *runner.Config) { c.ProcessKeepAwake = time.Hour })
	p := stale.startProc(t, wire.ProcStartRequest{Command: "echo stale; exec sleep 1000"})
	stale.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "stale"})
	// The replacement (epoch 8) runs while the stale runner still does, and sleeps: it commits a
	// snapshot, and keeps no table (it has no process and found none).
	_, sleepNewer := keptRunner(t, t.TempDir(), 8, shared)
	sleepNewer()
	decode(t, stale.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, nil)
	sleepStale()
	if _, err := store.Stat(context.Background(), "sandboxes/alice/procs/table.json"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("the fenced runner kept its table: %v", err)
	}
}

// A corrupt kept table does not stop the wake: the sandbox starts with an empty table, counted, and the
// next sleep replaces the record.
func TestProcTableCorruptRecord(t *testing.T) {
	base := t.TempDir()
	key := keptKey(base)
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

// A record the wake could not read is not lost: the next stop keeps its processes, older than the new
// ones. (The store fails the read at wake: the record's file is moved aside and a directory stands in its
// place until the woken runner is about to sleep.)
func TestProcTableUnreadableAtWakeIsMerged(t *testing.T) {
	base := t.TempDir()
	first := runToExitAndSleep(t, base, 7, "echo first")
	key := keptKey(base)
	if err := os.Rename(key, key+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(key, 0o700); err != nil {
		t.Fatal(err)
	}

	h, sleep := keptRunner(t, base, 8, func(c *runner.Config) { c.ProcessKeepAwake = time.Hour })
	if procs := h.listProcs(t); len(procs) != 0 {
		t.Fatalf("listed %+v from an unreadable record", procs)
	}
	if !h.metric(t, `warren_runner_process_table_loads_total{outcome="unavailable"} 1`) {
		t.Error("metrics lack the failed load")
	}
	second := h.startProc(t, wire.ProcStartRequest{Command: "echo second; exec sleep 1000"})
	h.waitProc(t, second.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "second"})
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(key+".aside", key); err != nil {
		t.Fatal(err)
	}
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+second.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, nil)
	sleep()

	h, _ = keptRunner(t, base, 9)
	procs := h.listProcs(t)
	if len(procs) != 2 || procs[0].ID != first.ID || procs[1].ID != second.ID || procs[1].Ended != "killed" {
		t.Fatalf("after a wake that could not read the record: %+v, want %s then %s", procs, first.ID, second.ID)
	}
	if l := h.procLogs(t, first.ID, 0); logText(l) != "first\n" {
		t.Fatalf("logs of the merged process: %+v", l)
	}
}

// The kept table is bounded: as many processes as the table keeps (twice -max-processes), and 1 MiB of
// logs in all, each process's tail shrinking to its share.
func TestProcTableKeptBounds(t *testing.T) {
	base := t.TempDir()
	limit := func(c *runner.Config) { c.MaxProcesses = 10 }
	h, sleep := keptRunner(t, base, 7, limit)
	var ids []string
	for range 22 {
		p := h.startProc(t, wire.ProcStartRequest{Command: "head -c 100000 /dev/zero | tr '\\0' y"})
		h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
		ids = append(ids, p.ID)
	}
	sleep()
	h, _ = keptRunner(t, base, 8, limit)
	procs := h.listProcs(t)
	if len(procs) != 20 || procs[0].ID != ids[2] || procs[19].ID != ids[21] {
		t.Fatalf("kept %d processes, want the last 20 of %v", len(procs), ids)
	}
	var total int64
	for _, p := range procs {
		kept := p.LogEnd - p.LogStart
		if p.LogEnd != 100000 || kept == 0 || kept > (1<<20)/20 {
			t.Fatalf("kept %d..%d of a log of 100000 bytes, want at most %d", p.LogStart, p.LogEnd, (1<<20)/20)
		}
		if l := h.procLogs(t, p.ID, 0); int64(len(logText(l))) != kept {
			t.Fatalf("logs answer %d bytes, %d kept", len(logText(l)), kept)
		}
		total += kept
	}
	if total > 1<<20 {
		t.Fatalf("%d bytes of logs kept", total)
	}
}
