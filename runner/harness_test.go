package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// harness is a runner started in-process on 127.0.0.1:0, with a host layout that puts things the sandbox
// must not see right next to the workspace:
//
//	base/users/alice/workspace   the workspace (ws)
//	base/users/alice/state       the runner's StateDir, holding state-secret.txt
//	base/users/bob/workspace     another user's workspace, holding secret.txt
//	base/users/secrets.env       a secrets file beside them
type harness struct {
	r         *runner.Runner
	url       string
	key       string
	base      string
	ws        string
	state     string
	other     string
	secrets   string
	secretVal string
	stop      context.CancelFunc // stops the runner as its scheduler would
}

// requireBwrap fails the test when bubblewrap is missing; only -short may skip.
func requireBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if testing.Short() {
			t.Skip("bubblewrap not installed (skipped under -short)")
		}
		t.Fatalf("bubblewrap (bwrap) is required for the runner tests: install it (apt-get install bubblewrap) or run with -short: %v", err)
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func startRunner(t testing.TB, mods ...func(*runner.Config)) *harness {
	t.Helper()
	base := t.TempDir()
	h := &harness{
		key:       randomHex(t, 16),
		base:      base,
		ws:        filepath.Join(base, "users", "alice", "workspace"),
		state:     filepath.Join(base, "users", "alice", "state"),
		other:     filepath.Join(base, "users", "bob", "workspace"),
		secrets:   filepath.Join(base, "users", "secrets.env"),
		secretVal: "TOPSECRET-" + randomHex(t, 4),
	}
	for _, d := range []string{h.state, h.other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(h.state, "state-secret.txt"), filepath.Join(h.other, "secret.txt"), h.secrets} {
		if err := os.WriteFile(f, []byte(h.secretVal+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	cfg := runner.Config{
		Issuer: "acme", User: "alice", Epoch: 7, Region: "test-1",
		Listen: "127.0.0.1:0", Workspace: h.ws, StateDir: h.state, Key: h.key,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level})),
	}
	for _, m := range mods {
		m(&cfg)
	}
	if !cfg.Insecure {
		requireBwrap(t)
	}
	r, err := runner.New(cfg)
	if err != nil {
		t.Fatalf("runner.New: %v", err)
	}
	h.r = r
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("Run ended before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runner not ready")
	}
	h.url = "http://" + r.Addr()
	return h
}

// do sends a request with the runner key (unless a header list overrides Authorization).
func (h *harness) do(t testing.TB, method, path string, body io.Reader, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (h *harness) doJSON(t testing.TB, method, path string, v any, headers ...string) *http.Response {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return h.do(t, method, path, bytes.NewReader(b), append([]string{"Content-Type", "application/json"}, headers...)...)
}

// exec runs a synchronous exec and requires 200.
func (h *harness) exec(t testing.TB, req wire.ExecRequest) wire.ExecResult {
	t.Helper()
	resp := h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", req)
	var res wire.ExecResult
	decode(t, resp, http.StatusOK, &res)
	return res
}

func decode(t testing.TB, resp *http.Response, status int, v any) {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
	}
}

// wantError requires a wire error body with code and the matching status.
func wantError(t testing.TB, resp *http.Response, code wire.Code) *wire.Error {
	t.Helper()
	var e wire.Error
	decode(t, resp, code.HTTPStatus(), &e)
	if e.Code != code || e.Message == "" {
		t.Fatalf("error body %+v, want code %s", e, code)
	}
	return &e
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data string
}

type sseReader struct{ sc *bufio.Scanner }

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	return &sseReader{sc: sc}
}

// next returns the next event, or io.EOF at the end of the stream.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
	if err := s.sc.Err(); err != nil {
		return ev, err
	}
	return ev, io.EOF
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processesMatching lists host pids whose command line contains marker.
func processesMatching(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
