package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/runner/isolate"
)

// The sandbox's network on pasta (-sandbox-network=pasta: pasta, the namespace's holder) against a
// tenant, and against its own failures: the agent's turns reach the model proxy after the tenant ran out
// of memory, after pasta was killed, and fail at once with unavailable when the network cannot be
// repaired. As root, like CI. (A veth network has no process to kill; every other agent test runs on it.)

// onPasta gives the runner a pasta network.
func onPasta(c *runner.Config) { c.NetworkStack = isolate.StackPasta }

// netGrant gives the sandbox memory for the agent's CLI and per-command /tmp and /dev/shm that together
// exceed it, so that a command filling both runs the sandbox out of memory with pages no process owns.
var netGrant = wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: -1, ComputeSeconds: -1,
	Limits: &wire.SandboxLimits{MemoryBytes: 512 << 20, TmpBytes: 320 << 20}}

// TestIsolationAgentTurnAfterMemoryHog: a command fills its /tmp and /dev/shm beyond the sandbox's memory
// and the kernel kills a process of the sandbox. Before pasta had a cgroup part of its own it was the one
// killed (the largest process in reach), the model proxy became unreachable and the next agent turn
// retried until it timed out; now the turn completes through the same pasta.
func TestIsolationAgentTurnAfterMemoryHog(t *testing.T) {
	needRoot(t)
	h, _ := agentRunner(t, "plain", nil, onPasta)
	pasta := childPid(t, "passt")
	resp := h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{
		Command: "dd if=/dev/zero of=/tmp/a bs=1M count=300 2>&1; dd if=/dev/zero of=/dev/shm/b bs=1M count=300 2>&1; echo survived", TimeoutMs: 60_000,
	}, wire.HeaderGrant, netGrant.Encode())
	var res wire.ExecResult
	decode(t, resp, http.StatusOK, &res)
	if !strings.Contains(res.Stdout, "Killed") {
		t.Fatalf("600 MiB of tmpfs under a 512 MiB limit killed nothing: %+v", res)
	}
	if err := syscall.Kill(pasta, 0); err != nil || childPid(t, "passt") != pasta {
		t.Fatalf("pasta (pid %d) died when the sandbox ran out of memory: %v", pasta, err)
	}
	if r, _ := turn(t, h.dialAs(t, netGrant), "", "hello"); r["is_error"] == true {
		t.Fatalf("the turn after the memory hog: %v", r)
	}
}

// TestIsolationAgentTurnAfterPastaKilled: pasta killed from the host (the test is root) is started again
// at once, counted and logged; the next agent turn completes through the new one.
func TestIsolationAgentTurnAfterPastaKilled(t *testing.T) {
	needRoot(t)
	h, _ := agentRunner(t, "plain", nil, onPasta)
	if r, _ := turn(t, h.dialAs(t, netGrant), "", "hello"); r["is_error"] == true {
		t.Fatalf("the first turn: %v", r)
	}
	old := childPid(t, "passt")
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pasta started again", func() bool {
		return metricValue(t, h, `warren_runner_sandbox_network_failures_total{outcome="restarted"}`) == "1"
	})
	if now := childPid(t, "passt"); now == old {
		t.Fatalf("the same pasta (pid %d) after the restart", now)
	}
	if r, _ := turn(t, h.dialAs(t, netGrant), "", "hello again"); r["is_error"] == true {
		t.Fatalf("the turn after pasta was killed: %v", r)
	}
}

// TestIsolationAgentTurnFailsWhenNetworkDies: the namespace's holder killed from the host while a turn
// streams: the network cannot be repaired, so the turn fails at once with unavailable (not at its timeout),
// a command is refused with it too or finds the runner stopped, and the runner stops the sandbox.
func TestIsolationAgentTurnFailsWhenNetworkDies(t *testing.T) {
	needRoot(t)
	h, ms := agentRunner(t, "long", nil, onPasta)
	c := h.dialAs(t, netGrant)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, m := range []any{
		map[string]any{"type": "init", "payload": map[string]any{}},
		map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": "tell me a long story"}},
	} {
		b, _ := json.Marshal(m)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	// Once the model streams its slow answer through pasta, the network dies.
	for deadline := time.Now().Add(60 * time.Second); !streaming(ms); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the model got no request from the turn within 60 s")
		}
	}
	if err := syscall.Kill(childPid(t, "cat"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	failed := func(how string, e wire.Error) {
		t.Helper()
		if e.Code != wire.Unavailable || !strings.Contains(e.Message, "network") {
			t.Fatalf("%s %+v (killed at %v), want unavailable saying the network died", how, e, killed)
		}
		t.Logf("the turn failed %v after the network died (%s): %+v", time.Since(killed), how, e)
	}
	for {
		_, b, err := c.Read(ctx)
		var ce websocket.CloseError
		if errors.As(err, &ce) { // the runner stopped: the close carries the reason
			var e wire.Error
			_ = json.Unmarshal([]byte(ce.Reason), &e)
			failed("closed with", e)
			break
		}
		if err != nil {
			t.Fatalf("read: %v (killed at %v)", err, killed)
		}
		var m serverMsg
		_ = json.Unmarshal(b, &m)
		if m.Type == "result" {
			// The CLI, stopped, may still report its turn as an error result; the error follows it.
			var r struct {
				IsError bool `json:"is_error"`
			}
			if _ = json.Unmarshal(b, &r); !r.IsError {
				t.Fatalf("the turn finished although its network died: %.300s", b)
			}
		}
		if m.Type == wire.TypeError {
			failed("error message", m.errorPayload())
			break
		}
	}
	waitFor(t, "the runner to stop", func() bool {
		resp, err := http.Get(h.url + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
}

// streaming reports whether the model server got the turn's request (the "long" answer it streams slowly).
func streaming(ms *modelserver.Server) bool {
	for _, r := range ms.Requests() {
		if r.Main && r.Scenario == "long" {
			return true
		}
	}
	return false
}

// childPid is the pid of this process's one child whose name starts with comm (pasta runs as passt or
// passt.avx2, the holder as cat; the runner runs in the test's process, so
// the network's pasta and holder are its children); the test fails without exactly one.
func childPid(t *testing.T, comm string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(b, ')')
		j := bytes.IndexByte(b, '(')
		if i < 0 || j < 0 || !strings.HasPrefix(string(b[j+1:i]), comm) {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("children named %s: %v, want one", comm, pids)
	}
	return pids[0]
}

// metricValue is the value of the metric line starting with name on /metrics ("" when absent).
func metricValue(t *testing.T, h *harness, name string) string {
	t.Helper()
	b, _ := io.ReadAll(h.do(t, http.MethodGet, "/metrics", nil).Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}
