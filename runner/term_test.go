package runner_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/termtest"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/runner/isolate"
	warren "github.com/warren-mesh/warren/sdk"
)

// sandboxClient is the Go SDK pointed straight at the runner (the runner's key is the bearer token).
func (h *harness) sandboxClient(t testing.TB) *warren.Sandbox {
	t.Helper()
	c, err := warren.New(h.url, h.key)
	if err != nil {
		t.Fatal(err)
	}
	return c.Sandbox()
}

func attachTerminal(t *testing.T, sb *warren.Sandbox, id string) (*warren.TerminalConn, *termtest.Screen) {
	t.Helper()
	tc, err := sb.AttachTerminal(context.Background(), id)
	if err != nil {
		t.Fatalf("attach %s: %v", id, err)
	}
	t.Cleanup(func() { _ = tc.Close() })
	return tc, termtest.Watch(tc)
}

// TestTerminal drives an interactive shell under bubblewrap through the SDK: output, resize, Ctrl-C, the
// boundary, detach and re-attach with replay, a second client, exit.
func TestTerminal(t *testing.T) {
	h := startRunner(t)
	sb := h.sandboxClient(t)
	ctx := context.Background()
	info, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Cols: 100, Rows: 30, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != wire.ProcRunning || info.Cols != 100 || info.Rows != 30 {
		t.Fatalf("created %+v", info)
	}
	tc, scr := attachTerminal(t, sb, info.ID)
	// Quotes split the words, so the echo of the typed line does not match what the command prints.
	termtest.Type(t, tc, "echo h''i-there\n")
	scr.WaitFor(t, "hi-there")
	termtest.Type(t, tc, "stty size\n")
	scr.WaitFor(t, "30 100")
	if err := tc.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	termtest.Type(t, tc, "stty size\n")
	scr.WaitFor(t, "40 120")
	if _, err := sb.ResizeTerminal(ctx, info.ID, 90, 20); err != nil {
		t.Fatal(err)
	}
	termtest.Type(t, tc, "stty size\n")
	scr.WaitFor(t, "20 90")

	// Ctrl-C is a byte; the terminal turns it into SIGINT for the foreground job (sleep would last 100 s).
	termtest.Type(t, tc, "sh -c 'echo sle\"\"eping; exec sleep 100'\n")
	scr.WaitFor(t, "sleeping")
	termtest.Type(t, tc, "\x03")
	termtest.Type(t, tc, "echo ali''ve\n")
	scr.WaitFor(t, "alive")

	// The boundary of exec: the sandbox's uid and hostname, its own PID namespace, no host files.
	termtest.Type(t, tc, "echo id=$(id -u) host=$(hostname) init=$(cat /proc/1/comm) secret=$(cat "+h.secrets+" 2>&1 | head -c 40) e''nd\n")
	scr.WaitFor(t, "id="+strconv.Itoa(isolate.SandboxUID)+" host="+isolate.Hostname+" init=bwrap secret=cat: ")
	scr.WaitFor(t, "end")
	if strings.Contains(scr.String(), h.secretVal) {
		t.Fatal("the terminal read a host file")
	}

	// Detach: the terminal runs on; the next client gets the kept output first.
	termtest.Type(t, tc, "echo mark''er-1\n")
	scr.WaitFor(t, "marker-1")
	if err := tc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := scr.Wait(t); err == nil {
		t.Fatal("read after close succeeded")
	}
	waitFor(t, "the detach", func() bool {
		in, err := sb.Terminal(ctx, info.ID)
		return err == nil && in.Attached == 0
	})
	if in, err := sb.Terminal(ctx, info.ID); err != nil || in.Status != wire.ProcRunning {
		t.Fatalf("after detach: %+v, %v", in, err)
	}
	tc2, scr2 := attachTerminal(t, sb, info.ID)
	scr2.WaitFor(t, "hi-there") // replayed
	scr2.WaitFor(t, "marker-1")
	tc3, scr3 := attachTerminal(t, sb, info.ID) // a second client sees the same terminal
	scr3.WaitFor(t, "marker-1")
	termtest.Type(t, tc3, "echo fr''om-3\n")
	scr2.WaitFor(t, "from-3")
	scr3.WaitFor(t, "from-3")
	if list, err := sb.Terminals(ctx); err != nil || len(list) != 1 || list[0].Attached != 2 {
		t.Fatalf("list = %+v, %v", list, err)
	}

	termtest.Type(t, tc2, "exit 5\n")
	for _, c := range []struct {
		tc  *warren.TerminalConn
		scr *termtest.Screen
	}{{tc2, scr2}, {tc3, scr3}} {
		if err := c.scr.Wait(t); err != io.EOF {
			t.Fatalf("end of output = %v, want io.EOF", err)
		}
		if code, ok := c.tc.ExitCode(); !ok || code != 5 {
			t.Fatalf("exit code = %d, %v; want 5", code, ok)
		}
	}
	in, err := sb.Terminal(ctx, info.ID)
	if err != nil || in.Status != wire.ProcExited || in.ExitCode == nil || *in.ExitCode != 5 {
		t.Fatalf("after exit: %+v, %v", in, err)
	}
	// Attaching to an exited terminal replays its output and its exit.
	tc4, scr4 := attachTerminal(t, sb, info.ID)
	scr4.WaitFor(t, "from-3")
	if err := scr4.Wait(t); err != io.EOF {
		t.Fatalf("end = %v", err)
	}
	if code, ok := tc4.ExitCode(); !ok || code != 5 {
		t.Fatalf("exit code = %d, %v", code, ok)
	}
	if err := sb.KillTerminal(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Terminal(ctx, info.ID); !warren.IsCode(err, warren.CodeNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// TestTerminalLimits: everything a client controls is bounded and refused with a typed error.
func TestTerminalLimits(t *testing.T) {
	h := startRunner(t)
	sb := h.sandboxClient(t)
	ctx := context.Background()

	for _, req := range []warren.TerminalRequest{
		{Cols: 0, Rows: 10}, {Cols: wire.MaxTermCols + 1, Rows: 10}, {Cols: 80, Rows: -1},
		{Args: []string{"x"}}, {Command: "sh", Env: map[string]string{"BAD=NAME": "x"}},
	} {
		if _, err := sb.CreateTerminal(ctx, req); !warren.IsCode(err, warren.CodeInvalidArgument) {
			t.Errorf("create %+v: %v, want invalid_argument", req, err)
		}
	}
	// Paths are checked like the files API's.
	if _, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Cwd: "../.."}); !warren.IsCode(err, warren.CodePermissionDenied) {
		t.Errorf("cwd outside the workspace: %v, want permission_denied", err)
	}
	if _, err := sb.AttachTerminal(ctx, "nope"); !warren.IsCode(err, warren.CodeNotFound) {
		t.Errorf("attach to unknown: %v", err)
	}
	resp := h.do(t, http.MethodGet, "/v1/sandbox/terminals/nope/attach", nil)
	wantError(t, resp, wire.InvalidArgument) // not a WebSocket upgrade

	// MaxTerminals running at once; the next is refused, and one killed makes room.
	var ids []string
	for range runner.MaxTerminals {
		in, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: "sleep", Args: []string{"1000"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	_, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: "sleep", Args: []string{"1000"}})
	if !warren.IsCode(err, warren.CodeResourceExhausted) {
		t.Fatalf("terminal %d: %v, want resource_exhausted", runner.MaxTerminals+1, err)
	}
	for _, id := range ids[1:] {
		if err := sb.KillTerminal(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// MaxTermAttached clients per terminal.
	id := ids[0]
	for range runner.MaxTermAttached {
		attachTerminal(t, sb, id)
	}
	if _, err := sb.AttachTerminal(ctx, id); !warren.IsCode(err, warren.CodeResourceExhausted) {
		t.Fatalf("attach %d: %v, want resource_exhausted", runner.MaxTermAttached+1, err)
	}

	// A bad control message or input past the limit ends the connection with a typed close.
	in, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: "cat"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ  websocket.MessageType
		msg  []byte
		code wire.Code
	}{
		{websocket.MessageText, []byte(`{"type":"resize","cols":0,"rows":5}`), wire.InvalidArgument},
		{websocket.MessageText, []byte(`{"type":"exit","code":1}`), wire.InvalidArgument},
		{websocket.MessageText, []byte(`{"type":"bogus"}`), wire.InvalidArgument},
		{websocket.MessageText, []byte(strings.Repeat(" ", wire.MaxTermControl+1)), wire.PayloadTooLarge},
	} {
		conn := dialTerminal(t, h, in.ID)
		if err := conn.Write(ctx, c.typ, c.msg); err != nil {
			t.Fatal(err)
		}
		_, _, err := readUntilClose(ctx, conn)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusCode(c.code.CloseCode()) || !strings.Contains(ce.Reason, string(c.code)) {
			t.Errorf("after %.40q: %v, want a close with %s", c.msg, err, c.code)
		}
	}
	// Input past MaxTermInput: the runner's read limit closes the connection (1009, message too big).
	conn := dialTerminal(t, h, in.ID)
	if err := conn.Write(ctx, websocket.MessageBinary, make([]byte, wire.MaxTermInput+1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readUntilClose(ctx, conn); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("oversized input: %v, want close 1009", err)
	}
	if in, err := sb.Terminal(ctx, in.ID); err != nil || in.Status != wire.ProcRunning {
		t.Fatalf("the terminal suffered from its clients: %+v, %v", in, err)
	}
}

// TestTerminalReplayBounded: the replay is the last TermReplayBytes of the output, not all of it.
func TestTerminalReplayBounded(t *testing.T) {
	h := startRunner(t)
	sb := h.sandboxClient(t)
	ctx := context.Background()
	// 210 KiB of numbered lines, then a marker.
	in, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: `seq -w 1 30000; echo all-written`})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the exit", func() bool {
		i, err := sb.Terminal(ctx, in.ID)
		return err == nil && i.Status == wire.ProcExited && i.Output > 30000*6
	})
	_, scr := attachTerminal(t, sb, in.ID)
	if err := scr.Wait(t); err != io.EOF {
		t.Fatal(err)
	}
	out := scr.String()
	if len(out) != runner.TermReplayBytes || !strings.HasSuffix(out, "all-written\r\n") {
		t.Fatalf("replayed %d bytes ending %q, want the last %d", len(out), out[max(0, len(out)-20):], runner.TermReplayBytes)
	}
	if strings.Contains(out, "\r\n00001\r\n") || !strings.Contains(out, "30000\r\n") {
		t.Fatal("the replay is not the end of the output")
	}
}

func dialTerminal(t *testing.T, h *harness, id string) *websocket.Conn {
	t.Helper()
	conn, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(h.url, "http")+"/v1/sandbox/terminals/"+id+"/attach",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + h.key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseNow() })
	return conn
}

// readUntilClose reads messages until the connection ends and returns the last read's result.
func readUntilClose(ctx context.Context, conn *websocket.Conn) (websocket.MessageType, []byte, error) {
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			return typ, b, err
		}
	}
}

// BenchmarkTerminalKeystroke measures one keystroke's round trip through an attached terminal under
// bubblewrap: a byte over the WebSocket into the pseudo-terminal, read by cat (raw mode, no echo) and
// written back, out of the pseudo-terminal and over the WebSocket to the client.
func BenchmarkTerminalKeystroke(b *testing.B) {
	h := startRunner(b)
	sb := h.sandboxClient(b)
	ctx := context.Background()
	in, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: "stty raw -echo && echo ready && exec cat"})
	if err != nil {
		b.Fatal(err)
	}
	tc, err := sb.AttachTerminal(ctx, in.ID)
	if err != nil {
		b.Fatal(err)
	}
	defer tc.Close()
	var seen []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(seen), "ready\n") {
		n, err := tc.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		seen = append(seen, buf[:n]...)
	}
	for b.Loop() {
		if _, err := tc.Write([]byte{'k'}); err != nil {
			b.Fatal(err)
		}
		if n, err := io.ReadAtLeast(tc, buf[:1], 1); err != nil || n != 1 || buf[0] != 'k' {
			b.Fatalf("read %q, %v", buf[:n], err)
		}
	}
}
