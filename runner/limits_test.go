package runner_test

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// TestSandboxLimitsFromGrant: the limits of the quota, carried in the edge's grant, hold for the user's
// commands, each refusal typed, and the runner survives them all.
func TestSandboxLimitsFromGrant(t *testing.T) {
	needRoot(t)
	h := startRunner(t)
	g := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: -1, ComputeSeconds: -1,
		Limits: &wire.SandboxLimits{WorkspaceBytes: 8 << 20, ConcurrentExecs: 1, Processes: 64, MemoryBytes: 96 << 20, CPUMillis: 500}}
	grant := []string{wire.HeaderGrant, g.Encode()}
	exec := func(t *testing.T, cmd string, status int) (wire.ExecResult, wire.Error) {
		t.Helper()
		resp := h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{Command: cmd}, grant...)
		var res wire.ExecResult
		var werr wire.Error
		if status == http.StatusOK {
			decode(t, resp, status, &res)
		} else {
			decode(t, resp, status, &werr)
		}
		return res, werr
	}

	t.Run("memory", func(t *testing.T) {
		res, _ := exec(t, "head -c 400m /dev/zero | tail > /dev/null", http.StatusOK)
		if !res.OOMKilled || res.ExitCode != 137 {
			t.Fatalf("a 400 MiB hog under 96 MiB: %+v", res)
		}
	})
	t.Run("concurrent execs", func(t *testing.T) {
		var wg sync.WaitGroup
		wg.Go(func() { exec(t, "sleep 2", http.StatusOK) })
		time.Sleep(500 * time.Millisecond)
		_, werr := exec(t, "true", http.StatusTooManyRequests)
		if werr.Code != wire.ResourceExhausted {
			t.Fatalf("second command at once: %+v", werr)
		}
		wg.Wait()
	})
	t.Run("workspace size", func(t *testing.T) {
		// Each file is under the limit; together they are not.
		// The guard kills the command within about a second of the workspace passing the limit.
		resp := h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{Command: "for i in 1 2 3 4; do head -c 3000000 /dev/zero > f$i; done; sleep 5; echo survived"}, grant...)
		var killed wire.Error
		decode(t, resp, http.StatusTooManyRequests, &killed)
		if killed.Code != wire.ResourceExhausted {
			t.Fatalf("a command filling the workspace: %+v", killed)
		}
		// Over the limit, a write still fails: killed once the workspace grows (sleep: past a poll).
		_, werr := exec(t, "head -c 200000 /dev/zero > more; sleep 3; echo survived", http.StatusTooManyRequests)
		if werr.Code != wire.ResourceExhausted || !strings.Contains(werr.Message, "max_workspace_bytes") {
			t.Fatalf("a write in a full workspace: %+v", werr)
		}
		// Issue #21 item 9: a full workspace can be cleaned from exec (before, every command was
		// refused while it was over, rm included, and only the files API could free space).
		if res, werr := exec(t, "rm -f f1 f2 more && echo removed", http.StatusOK); strings.TrimSpace(res.Stdout) != "removed" {
			t.Fatalf("rm in a full workspace: %+v %+v", res, werr)
		}
		if res, werr := exec(t, "head -c 1000000 /dev/zero > g; sleep 2; echo ok", http.StatusOK); strings.TrimSpace(res.Stdout) != "ok" {
			t.Fatalf("a write after rm: %+v %+v", res, werr)
		}
		// A write over the limit is still killed.
		_, werr = exec(t, "head -c 3000000 /dev/zero > h; sleep 3; echo survived", http.StatusTooManyRequests)
		if werr.Code != wire.ResourceExhausted {
			t.Fatalf("a write past the limit after rm: %+v", werr)
		}
	})
}

// TestWorkspaceGuardEvasions: files the size guard must still count — under a path longer than PATH_MAX,
// and many empty ones (inodes) — and parallel uploads that must not each pass the same check.
func TestWorkspaceGuardEvasions(t *testing.T) {
	needRoot(t)
	h := startRunner(t)
	g := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: -1, ComputeSeconds: -1,
		Limits: &wire.SandboxLimits{WorkspaceBytes: 16 << 20}}
	grant := []string{wire.HeaderGrant, g.Encode()}
	exec := func(t *testing.T, cmd string) (int, wire.ExecResult) {
		t.Helper()
		resp := h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{Command: cmd}, grant...)
		var res wire.ExecResult
		if resp.StatusCode == http.StatusOK {
			decode(t, resp, http.StatusOK, &res)
		}
		return resp.StatusCode, res
	}
	t.Run("deep path", func(t *testing.T) {
		// 30 levels of 200-character names: 6 KB of path, more than PATH_MAX.
		code, res := exec(t, `python3 -c "
import os
n = 'd' * 200
for _ in range(30):
    os.mkdir(n)
    os.chdir(n)
open('big', 'wb').write(bytes(12000000))
print('ok')"`)
		if code != http.StatusOK || !strings.Contains(res.Stdout, "ok") {
			t.Fatalf("setup: %d %+v", code, res)
		}
		exec(t, "head -c 12000000 /dev/zero > big2") // allowed, or killed by the guard
		time.Sleep(2500 * time.Millisecond)          // the usage cache
		resp := h.do(t, http.MethodPost, "/v1/sandbox/files/mkdir?path=d", nil, grant...)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("24 MB under a 16 MiB limit, half of it under a path longer than PATH_MAX: mkdir status %d", resp.StatusCode)
		}
	})
}

// needRoot fails the test without root (as CI has): the sandbox's uid and cgroup need it; -short skips.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root (skipped under -short)")
		}
		t.Fatal("needs root (as in CI): the sandbox's cgroup and uid")
	}
}
