package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

func TestNewValidates(t *testing.T) {
	base := t.TempDir()
	valid := func() runner.Config {
		return runner.Config{Issuer: "i", User: "u", Key: "k", Workspace: filepath.Join(base, "ws"), Insecure: true}
	}
	tests := []struct {
		name string
		mod  func(*runner.Config)
		want error
		text string
	}{
		{"no key", func(c *runner.Config) { c.Key = "" }, runner.ErrConfig, "key is required"},
		{"no user", func(c *runner.Config) { c.User = "" }, runner.ErrConfig, "user is required"},
		{"no workspace", func(c *runner.Config) { c.Workspace = "" }, runner.ErrConfig, "workspace is required"},
		{"negative epoch", func(c *runner.Config) { c.Epoch = -1 }, runner.ErrConfig, "epoch"},
		{"timeouts", func(c *runner.Config) { c.DefaultExecTimeout = time.Hour }, runner.ErrConfig, "exceeds the maximum"},
		{"state dir inside workspace", func(c *runner.Config) { c.StateDir = filepath.Join(c.Workspace, "state") }, runner.ErrConfig, "inside the workspace"},
		{"state dir is workspace", func(c *runner.Config) { c.StateDir = c.Workspace }, runner.ErrConfig, "inside the workspace"},
		{"no bwrap", func(c *runner.Config) { c.Insecure = false; c.BwrapPath = "/nonexistent/bwrap" }, runner.ErrNoBwrap, "-insecure-no-sandbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.mod(&cfg)
			_, err := runner.New(cfg)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("New = %v, want %v mentioning %q", err, tt.want, tt.text)
			}
		})
	}
	t.Run("creates the workspace 0700", func(t *testing.T) {
		cfg := valid()
		cfg.Workspace = filepath.Join(base, "new", "ws")
		if _, err := runner.New(cfg); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(cfg.Workspace)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("workspace: %v, %v", fi, err)
		}
	})
}

func TestHealthzAndAuth(t *testing.T) {
	h := startRunner(t)
	resp := h.do(t, http.MethodGet, "/healthz", nil, "Authorization", "")
	var hz runner.Health
	decode(t, resp, http.StatusOK, &hz)
	if hz != (runner.Health{Status: "ok"}) {
		t.Fatalf("healthz without the key = %+v, want only the status (no issuer, user, epoch or clients)", hz)
	}
	resp = h.do(t, http.MethodGet, "/healthz", nil)
	decode(t, resp, http.StatusOK, &hz)
	if hz.Status != "ok" || hz.Issuer != "acme" || hz.User != "alice" || hz.Epoch != 7 || hz.Clients != 0 || hz.RunningCommands != 0 || hz.Sandbox != "bwrap" {
		t.Fatalf("healthz = %+v", hz)
	}

	routes := []struct{ method, path string }{
		{http.MethodPost, "/v1/sandbox/exec"},
		{http.MethodGet, "/v1/sandbox/files?path=x"},
		{http.MethodPut, "/v1/sandbox/files?path=x"},
		{http.MethodDelete, "/v1/sandbox/files?path=x"},
		{http.MethodGet, "/v1/sandbox/files/list"},
		{http.MethodGet, "/v1/agent"},
		{http.MethodGet, "/metrics"},
		{http.MethodGet, "/nope"},
	}
	for _, rt := range routes {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + h.key + "x", "Basic " + h.key, h.key} {
			t.Run(fmt.Sprintf("%s %s %q", rt.method, rt.path, auth), func(t *testing.T) {
				resp := h.do(t, rt.method, rt.path, strings.NewReader(`{"command":"true"}`), "Authorization", auth)
				wantError(t, resp, wire.Unauthenticated)
			})
		}
	}
	t.Run("request id echoed", func(t *testing.T) {
		resp := h.do(t, http.MethodGet, "/nope", nil, "X-Request-Id", "req-123")
		wantError(t, resp, wire.NotFound)
		if got := resp.Header.Get("X-Request-Id"); got != "req-123" {
			t.Fatalf("X-Request-Id = %q", got)
		}
	})
	t.Run("wrong method", func(t *testing.T) {
		resp := h.do(t, http.MethodGet, "/v1/sandbox/exec", nil)
		wantError(t, resp, wire.InvalidArgument)
		if resp.Header.Get("Allow") != "POST" {
			t.Fatalf("Allow = %q", resp.Header.Get("Allow"))
		}
	})
}

func TestMetrics(t *testing.T) {
	h := startRunner(t)
	h.exec(t, wire.ExecRequest{Command: "exit 2"})
	h.do(t, http.MethodGet, "/v1/sandbox/files/list", nil)
	resp := h.do(t, http.MethodGet, "/metrics", nil)
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`warren_runner_exec_total{outcome="nonzero"} 1`,
		`warren_runner_exec_duration_seconds_count 1`,
		`warren_runner_file_ops_total{op="list",result="ok"} 1`,
		`warren_runner_agent_connections 0`,
		`warren_runner_running_commands 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestRunOnce(t *testing.T) {
	h := startRunner(t)
	if err := h.r.Run(context.Background()); !errors.Is(err, runner.ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

// TestShutdownKillsCommands: cancelling Run ends a running command (503 to its caller) and Run returns.
func TestShutdownKillsCommands(t *testing.T) {
	requireBwrap(t)
	// A runner of our own, so we control its context.
	base := t.TempDir()
	r, err := runner.New(runner.Config{Issuer: "i", User: "u", Key: "k", Workspace: filepath.Join(base, "ws"), ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	<-r.Ready()
	marker := fmt.Sprintf("86400.%d", time.Now().UnixNano()%1e9)
	type result struct {
		status int
		body   string
	}
	res := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.Addr()+"/v1/sandbox/exec", strings.NewReader(`{"command":"sleep `+marker+`"}`))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b)}
	}()
	waitFor(t, "the command to run", func() bool { return r.RunningCommands() == 1 && len(processesMatching("sleep "+marker)) > 0 })
	agent := (&harness{url: "http://" + r.Addr(), key: "k"}).dialAgent(t)
	agent.send(`{"type":"init"}`)
	for range 3 {
		agent.read()
	}
	rcancel()
	if code := agent.expectClose(); code != websocket.StatusGoingAway {
		t.Fatalf("agent connection closed with %d, want 1001", code)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	got := <-res
	if got.status != http.StatusServiceUnavailable || !strings.Contains(got.body, "shutting down") {
		t.Fatalf("exec during shutdown: %d %s", got.status, got.body)
	}
	waitFor(t, "the command's processes to die", func() bool { return len(processesMatching("sleep "+marker)) == 0 })
}
