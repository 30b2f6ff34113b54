package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// echoServer is a perl program (perl is in every Debian base system) that listens on port, says so, echoes
// its stdin, and exits 7 on SIGTERM after saying so.
func echoServer(port int) wire.ProcStartRequest {
	script := fmt.Sprintf(`$|=1; $SIG{TERM}=sub{ print "got TERM\n"; exit 7 };
print STDERR "starting\n";
my $s=IO::Socket::INET->new(LocalAddr=>"127.0.0.1",LocalPort=>%d,Listen=>5,ReuseAddr=>1) or die "listen: $!";
print "listening on %d\n";
while (my $l = <STDIN>) { print "echo: $l" }
print "stdin closed\n"; sleep 1000;`, port, port)
	return wire.ProcStartRequest{Command: "perl", Args: []string{"-MIO::Socket::INET", "-e", script}}
}

func (h *harness) startProc(t testing.TB, req wire.ProcStartRequest) wire.ProcInfo {
	t.Helper()
	var in wire.ProcInfo
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs", req), http.StatusCreated, &in)
	if in.ID == "" || in.Status != wire.ProcRunning {
		t.Fatalf("started %+v", in)
	}
	return in
}

func (h *harness) waitProc(t testing.TB, id string, w wire.ProcWaitRequest) wire.ProcWaitResult {
	t.Helper()
	var res wire.ProcWaitResult
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+id+"/wait", w), http.StatusOK, &res)
	return res
}

// readLogEvents reads a logs stream to its exit event and returns the chunks and the exit's ProcInfo.
func readLogEvents(t testing.TB, body io.Reader) ([]wire.ProcChunk, wire.ProcInfo) {
	t.Helper()
	sse := newSSEReader(body)
	var chunks []wire.ProcChunk
	for {
		ev, err := sse.next()
		if err != nil {
			t.Fatalf("logs stream ended without exit: %v", err)
		}
		switch ev.name {
		case wire.EventStdout, wire.EventStderr:
			var c wire.ProcChunk
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil || c.Stream != ev.name {
				t.Fatalf("chunk %q: %v", ev.data, err)
			}
			chunks = append(chunks, c)
		case wire.EventExit:
			var in wire.ProcInfo
			if err := json.Unmarshal([]byte(ev.data), &in); err != nil {
				t.Fatal(err)
			}
			return chunks, in
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
}

func joinChunks(cs []wire.ProcChunk) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Data)
	}
	return b.String()
}

// A background process under bubblewrap: it listens on a port of the sandbox's network (an exec reaches
// it), takes stdin, its logs are read from an offset and followed live, a signal ends it, and it is listed
// with its exit status afterwards.
func TestProcessLifecycle(t *testing.T) {
	t.Run("bwrap", func(t *testing.T) { testProcessLifecycle(t, 18765) })
	// Insecure mode (no bubblewrap) signals the process group and sees the host's network.
	t.Run("insecure", func(t *testing.T) {
		testProcessLifecycle(t, 18767, func(c *runner.Config) { c.Insecure = true })
	})
}

func testProcessLifecycle(t *testing.T, port int, mods ...func(*runner.Config)) {
	h := startRunner(t, mods...)
	p := h.startProc(t, echoServer(port))

	res := h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitPort, Port: port, TimeoutMs: 30000})
	if res.Proc.Status != wire.ProcRunning {
		t.Fatalf("after wait for port: %+v", res.Proc)
	}
	// The port is the sandbox's: a command of the same sandbox connects to it.
	conn := h.exec(t, wire.ExecRequest{Command: "perl", Args: []string{"-MIO::Socket::INET", "-e",
		fmt.Sprintf(`IO::Socket::INET->new(PeerAddr=>"127.0.0.1:%d") or die "connect: $!"; print "connected"`, port)}})
	if conn.ExitCode != 0 || conn.Stdout != "connected" {
		t.Fatalf("connect from an exec: %+v", conn)
	}
	line := h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: `^listening on \d+$`, Regex: true})
	if line.Line != fmt.Sprintf("listening on %d", port) {
		t.Fatalf("log wait matched %+v", line)
	}

	// stdin: a line in, its echo out.
	resp := h.do(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/stdin", strings.NewReader("hello\n"))
	decode(t, resp, http.StatusNoContent, nil)
	echo := h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "echo: hello", Offset: line.Offset})
	if echo.Line != "echo: hello" || echo.Offset <= line.Offset {
		t.Fatalf("echo %+v after %+v", echo, line)
	}

	// Logs as JSON from the start, then as a stream from the echo's offset.
	var logs wire.ProcLogs
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID+"/logs", nil), http.StatusOK, &logs)
	all := joinChunks(logs.Chunks)
	if logs.Start != 0 || int(logs.Next) != len(all) || !strings.Contains(all, "starting\n") || !strings.Contains(all, "echo: hello\n") {
		t.Fatalf("logs %+v", logs)
	}
	stream := h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID+"/logs?offset="+strconv.FormatInt(echo.Offset, 10), nil,
		"Accept", "text/event-stream")
	if ct := stream.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("logs stream content type %q", ct)
	}

	// SIGTERM: the program's handler runs and exits 7; the stream delivers that, then exit.
	var sig wire.ProcInfo
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/signal", wire.ProcSignalRequest{Signal: "SIGTERM"}), http.StatusOK, &sig)
	chunks, exit := readLogEvents(t, stream.Body)
	if got := joinChunks(chunks); got != "echo: hello\ngot TERM\n" || chunks[0].Offset != echo.Offset {
		t.Fatalf("streamed from %d: %q (chunks %+v)", echo.Offset, got, chunks)
	}
	if exit.Status != wire.ProcExited || exit.ExitCode == nil || *exit.ExitCode != 7 || exit.Ended != "" {
		t.Fatalf("exit event %+v", exit)
	}
	done := h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	if *done.Proc.ExitCode != 7 {
		t.Fatalf("wait for exit %+v", done.Proc)
	}
	var list wire.ProcList
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs", nil), http.StatusOK, &list)
	if len(list.Procs) != 1 || list.Procs[0].ID != p.ID || *list.Procs[0].ExitCode != 7 || list.Procs[0].EndedAt == "" {
		t.Fatalf("list %+v", list)
	}
	// An exited process takes no input and waits for no port; it can be forgotten.
	wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/stdin", strings.NewReader("x")), wire.Conflict)
	wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/wait", wire.ProcWaitRequest{For: wire.WaitPort, Port: port + 1}), wire.Conflict)
	decode(t, h.do(t, http.MethodDelete, "/v1/sandbox/procs/"+p.ID, nil), http.StatusNoContent, nil)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID, nil), wire.NotFound)
}

// KILL ends the whole tree, a background child included; closing stdin is seen by the program.
func TestProcessKillAndStdinClose(t *testing.T) {
	h := startRunner(t)
	marker := "proc-kill-" + randomHex(t, 4)
	// The background child's command line carries the marker too, so the check below sees both.
	p := h.startProc(t, wire.ProcStartRequest{Command: "sh -c 'sleep 1000; : " + marker + "' & echo " + marker + "; cat; echo eof; sleep 1000"})
	h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: marker})
	decode(t, h.do(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/stdin?close=true", strings.NewReader("bye\n")), http.StatusNoContent, nil)
	h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "eof"})
	var in wire.ProcInfo
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID, nil), http.StatusOK, &in)
	if !in.StdinClosed {
		t.Fatalf("stdin not closed: %+v", in)
	}
	wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/stdin", strings.NewReader("x")), wire.Conflict)
	if n := len(processesMatching(marker)); n < 3 { // bwrap, the program and its background child
		t.Fatalf("%d processes carry the marker before the kill", n)
	}
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/signal", wire.ProcSignalRequest{Signal: "kill"}), http.StatusOK, nil)
	res := h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	if *res.Proc.ExitCode != 128+9 || res.Proc.Ended != "killed" {
		t.Fatalf("killed: %+v", res.Proc)
	}
	waitFor(t, "the sandbox's processes to be gone", func() bool { return len(processesMatching(marker)) == 0 })
}

// Bad input is refused with a typed error before anything starts; the caps hold.
func TestProcessRejects(t *testing.T) {
	h := startRunner(t, func(c *runner.Config) { c.MaxProcesses = 2; c.ProcessLogBytes = 4096 })
	env := map[string]string{}
	for i := range wire.MaxProcEnv + 1 {
		env["V"+strconv.Itoa(i)] = "x"
	}
	envJSON, _ := json.Marshal(wire.ProcStartRequest{Command: "true", Env: env})
	for _, tt := range []struct {
		name, body string
		code       wire.Code
	}{
		{"not JSON", `{"command":`, wire.InvalidArgument},
		{"unknown field", `{"command":"true","timeout":5}`, wire.InvalidArgument},
		{"no command", `{"args":["x"]}`, wire.InvalidArgument},
		{"long command", `{"command":"` + strings.Repeat("x", wire.MaxProcCommand+1) + `"}`, wire.InvalidArgument},
		{"too many env", string(envJSON), wire.InvalidArgument},
		{"bad env name", `{"command":"true","env":{"A-B":"x"}}`, wire.InvalidArgument},
		{"cwd escapes", `{"command":"true","cwd":"../x"}`, wire.PermissionDenied},
		{"cwd absolute", `{"command":"true","cwd":"/etc"}`, wire.PermissionDenied},
		{"cwd missing", `{"command":"true","cwd":"nope"}`, wire.NotFound},
		{"body too large", `{"command":"` + strings.Repeat("x", wire.MaxProcBody) + `"}`, wire.PayloadTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/procs", strings.NewReader(tt.body)), tt.code)
		})
	}
	var list wire.ProcList
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs", nil), http.StatusOK, &list)
	if len(list.Procs) != 0 {
		t.Fatalf("refused starts left processes: %+v", list)
	}

	// The log keeps the last 4096 bytes; offsets say what was dropped.
	a := h.startProc(t, wire.ProcStartRequest{Command: "head -c 10000 /dev/zero | tr '\\0' a; echo; echo tail-mark; sleep 1000"})
	h.waitProc(t, a.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "tail-mark"})
	var logs wire.ProcLogs
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+a.ID+"/logs?offset=3", nil), http.StatusOK, &logs)
	if logs.Next != 10011 || logs.Start != 10011-4096 || len(joinChunks(logs.Chunks)) != 4096 {
		t.Fatalf("bounded log: start %d next %d, %d bytes", logs.Start, logs.Next, len(joinChunks(logs.Chunks)))
	}

	b := h.startProc(t, wire.ProcStartRequest{Command: "sleep 1000"})
	e := wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs", wire.ProcStartRequest{Command: "sleep 1000"}), wire.ResourceExhausted)
	if e.Details["limit"] != float64(2) {
		t.Fatalf("cap error %+v", e)
	}
	for _, tt := range []struct {
		name, path, body string
		code             wire.Code
	}{
		{"signal not allowed", "/signal", `{"signal":"SEGV"}`, wire.InvalidArgument},
		{"signal by number", "/signal", `{"signal":"9"}`, wire.InvalidArgument},
		{"wait for nothing", "/wait", `{"for":"godot"}`, wire.InvalidArgument},
		{"wait port out of range", "/wait", `{"for":"port","port":70000}`, wire.InvalidArgument},
		{"wait bad regex", "/wait", `{"for":"log","pattern":"(","regex":true}`, wire.InvalidArgument},
		{"wait long pattern", "/wait", `{"for":"log","pattern":"` + strings.Repeat("x", wire.MaxProcPattern+1) + `"}`, wire.InvalidArgument},
		{"wait times out", "/wait", `{"for":"port","port":1,"timeoutMs":50}`, wire.Timeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/procs/"+b.ID+tt.path, strings.NewReader(tt.body)), tt.code)
		})
	}
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+b.ID+"/logs?offset=-1", nil), wire.InvalidArgument)
	wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/procs/"+b.ID+"/stdin", strings.NewReader(strings.Repeat("x", wire.MaxProcStdinWrite+1))), wire.PayloadTooLarge)
	wantError(t, h.do(t, http.MethodDelete, "/v1/sandbox/procs/"+b.ID, nil), wire.Conflict)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/nope", nil), wire.NotFound)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+b.ID+"/nope", nil), wire.NotFound)
	metrics, _ := io.ReadAll(h.do(t, http.MethodGet, "/metrics", nil).Body)
	for _, m := range []string{`warren_runner_process_starts_total{outcome="ok"} 2`, `warren_runner_process_starts_total{outcome="refused"} 11`, "warren_runner_processes_running 2"} {
		if !strings.Contains(string(metrics), m+"\n") {
			t.Errorf("metrics lack %q", m)
		}
	}
	wantError(t, h.do(t, http.MethodPut, "/v1/sandbox/procs/"+b.ID+"/wait", nil), wire.InvalidArgument)
}

// A running process keeps an idle sandbox awake; once it ends, the sandbox sleeps. With the operator's cap
// on process time, the sandbox sleeps anyway and the process dies with it.
func TestProcessKeepsSandboxAwake(t *testing.T) {
	run := func(t *testing.T, keepAwake time.Duration) (*harness, chan error) {
		base := t.TempDir()
		r, err := runner.New(runner.Config{Issuer: "acme", User: "alice", Epoch: 7, Listen: "127.0.0.1:0",
			Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Key: "k",
			IdleTimeout: 300 * time.Millisecond, ProcessKeepAwake: keepAwake, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- r.Run(context.Background()) }()
		select {
		case <-r.Ready():
		case err := <-done:
			t.Fatalf("Run: %v", err)
		}
		return &harness{r: r, url: "http://" + r.Addr(), key: "k"}, done
	}
	requireBwrap(t)
	t.Run("awake while it runs", func(t *testing.T) {
		h, done := run(t, 0)
		p := h.startProc(t, wire.ProcStartRequest{Command: "sleep 1000"})
		// Many idle timeouts pass without a request: the process holds the sandbox.
		select {
		case err := <-done:
			t.Fatalf("the sandbox slept with a process running: %v", err)
		case <-time.After(10 * 300 * time.Millisecond):
		}
		decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, nil)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run after sleeping: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the sandbox stayed awake after its last process ended")
		}
	})
	t.Run("the operator's cap", func(t *testing.T) {
		marker := "keep-awake-cap-" + randomHex(t, 4)
		h, done := run(t, 500*time.Millisecond)
		h.startProc(t, wire.ProcStartRequest{Command: "sleep 1000; echo " + marker})
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run after sleeping: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a process kept the sandbox awake past the operator's cap")
		}
		if pids := processesMatching(marker); len(pids) != 0 {
			t.Fatalf("the process outlived its sandbox: %v", pids)
		}
	})
	t.Run("a terminal, up to the operator's cap", func(t *testing.T) {
		marker := "keep-awake-term-" + randomHex(t, 4)
		h, done := run(t, 500*time.Millisecond)
		var in wire.TermInfo
		decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/terminals", wire.TermCreateRequest{Command: "sleep 1000; echo " + marker}), http.StatusCreated, &in)
		waitFor(t, "the terminal's program", func() bool { return len(processesMatching(marker)) > 0 })
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run after sleeping: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a terminal kept the sandbox awake past the operator's cap")
		}
		if pids := processesMatching(marker); len(pids) != 0 {
			t.Fatalf("the terminal outlived its sandbox: %v", pids)
		}
	})
}

// BenchmarkProcessFirstLog measures a background process from the start request to its first line of
// output seen by a log wait, under bubblewrap (start, wait, kill: three requests).
func BenchmarkProcessFirstLog(b *testing.B) {
	h := startRunner(b)
	for b.Loop() {
		p := h.startProc(b, wire.ProcStartRequest{Command: "echo ready; exec sleep 1000"})
		h.waitProc(b, p.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "ready"})
		b.StopTimer()
		decode(b, h.doJSON(b, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, nil)
		h.waitProc(b, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
		decode(b, h.do(b, http.MethodDelete, "/v1/sandbox/procs/"+p.ID, nil), http.StatusNoContent, nil)
		b.StartTimer()
	}
}
