package edge

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// realRunner is a runner.Runner under bubblewrap with the key the test regions use.
func realRunner(t *testing.T) *meshRunner {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bubblewrap (bwrap) is required: install it (apt-get install bubblewrap): %v", err)
	}
	base := t.TempDir()
	r, err := runner.New(runner.Config{Issuer: "acme", User: "alice", Epoch: 3, Listen: "127.0.0.1:0",
		Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Key: "runner-key",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("runner: %v", err)
	}
	return &meshRunner{url: "http://" + r.Addr(), release: make(chan struct{}), closed: make(chan websocket.CloseError, 1)}
}

// The process and session APIs reach a user held in region a through region b's edge: a process is
// started, its logs stream live through both edges and the mesh, and the session listing and its typed
// errors come back.
func TestForwardProcessesAndSessions(t *testing.T) {
	rn := realRunner(t)
	_, b, _ := twoRegions(t, rn, live)
	ctx := testCtx(t)
	call := caller(t, ctx, b.url)
	resp := call("POST", "/v1/sandbox/procs", `{"command":"echo first; read x; echo second $x"}`)
	var p wire.ProcInfo
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusCreated || p.ID == "" {
		t.Fatalf("start through b: %d %+v %v", resp.StatusCode, p, err)
	}
	logs := call("GET", "/v1/sandbox/procs/"+p.ID+"/logs", "", "Accept", "text/event-stream")
	if logs.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("logs through b: %d %v", logs.StatusCode, logs.Header)
	}
	event := rawEvents(t, logs.Body)
	if ev := event(); !strings.Contains(ev, `"data":"first\n"`) {
		t.Fatalf("first event %q", ev)
	}
	// The stream is live across the mesh: the second line is written only now.
	if r := call("POST", "/v1/sandbox/procs/"+p.ID+"/stdin?close=true", "live\n"); r.StatusCode != http.StatusNoContent {
		t.Fatalf("stdin through b: %d", r.StatusCode)
	}
	if ev := event(); !strings.Contains(ev, `"data":"second live\n"`) {
		t.Fatalf("second event %q", ev)
	}
	if ev := event(); !strings.HasPrefix(ev, "event: exit\n") || !strings.Contains(ev, `"exitCode":0`) {
		t.Fatalf("exit event %q", ev)
	}
	resp = call("GET", "/v1/sessions", "")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"sessions":[]}` {
		t.Fatalf("sessions through b: %d %s", resp.StatusCode, body)
	}
	resp = call("DELETE", "/v1/sessions/11111111-1111-4111-8111-111111111111", "")
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"not_found"`) {
		t.Fatalf("delete through b: %d %s", resp.StatusCode, body)
	}
	if got := metric(t, b.reg, "warren_edge_requests_total", "route", "procs", "code", "201"); got != 1 {
		t.Fatalf("b's warren_edge_requests_total{procs,201} = %v", got)
	}
}
