package runner_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	warren "github.com/warren-mesh/warren/sdk"
)

// TestQuotaPerUserLimitsFromGrant: the per-user limits that were runner flags, carried in the edge's grant
// from the user's quota (max_background_processes, max_process_log_bytes, max_terminals, max_file_watches,
// max_tasks), hold for the next request, each refusal typed and naming the quota's field; a grant that
// leaves them 0 (not set) gives the runner's flags and defaults back.
func TestQuotaPerUserLimitsFromGrant(t *testing.T) {
	store, err := blobfs.New(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	h := startRunner(t, func(c *runner.Config) {
		c.Agent = scriptedAgent{}
		c.Snapshots, c.SnapshotPrefix = store, "sandboxes/alice"
		c.MaxProcesses, c.ProcessLogBytes = 4, 1<<20
		c.Tasks = runner.TaskConfig{MaxActive: 3}
	})
	limited := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: -1, ComputeSeconds: -1,
		Limits: &wire.SandboxLimits{BackgroundProcesses: 1, ProcessLogBytes: 4096, Terminals: 1, FileWatches: 1, Tasks: 1}}
	unset := limited
	unset.Limits = &wire.SandboxLimits{MemoryBytes: 512 << 20} // another limit set, these not
	as := func(g wire.Grant) []string { return []string{wire.HeaderGrant, g.Encode()} }
	refused := func(t *testing.T, resp *http.Response, code wire.Code, quota string, limit float64) {
		t.Helper()
		if resp.StatusCode != code.HTTPStatus() { // not read: an accepted watch is a stream without end
			t.Fatalf("%s %s: status %d, want %d", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, code.HTTPStatus())
		}
		e := wantError(t, resp, code)
		if e.Details["limit"] != limit || e.Details["quota"] != quota || !strings.Contains(e.Message, quota) {
			t.Fatalf("refusal %+v, want limit %v naming %s", e, limit, quota)
		}
	}
	start := func(t *testing.T, g wire.Grant, cmd string) *http.Response {
		t.Helper()
		return h.doJSON(t, http.MethodPost, "/v1/sandbox/procs", wire.ProcStartRequest{Command: cmd}, as(g)...)
	}

	t.Run("background processes and their logs", func(t *testing.T) {
		var p wire.ProcInfo
		decode(t, start(t, limited, "head -c 10000 /dev/zero | tr '\\0' a; echo; echo tail-mark; sleep 1000"), http.StatusCreated, &p)
		refused(t, start(t, limited, "sleep 1000"), wire.ResourceExhausted, "max_background_processes", 1)
		h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "tail-mark"})
		var logs wire.ProcLogs
		decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID+"/logs", nil, as(limited)...), http.StatusOK, &logs)
		if logs.Next != 10011 || logs.Start != 10011-4096 {
			t.Fatalf("log under max_process_log_bytes 4096: start %d next %d", logs.Start, logs.Next)
		}
		// Not set: the runner's -max-processes (4) and -process-log-bytes (1 MiB) apply again.
		var q wire.ProcInfo
		decode(t, start(t, unset, "head -c 10000 /dev/zero | tr '\\0' a; echo; echo tail-mark; sleep 1000"), http.StatusCreated, &q)
		decode(t, start(t, unset, "sleep 1000"), http.StatusCreated, nil)
		decode(t, start(t, unset, "sleep 1000"), http.StatusCreated, nil)
		refused(t, start(t, unset, "sleep 1000"), wire.ResourceExhausted, "max_background_processes", 4)
		h.waitProc(t, q.ID, wire.ProcWaitRequest{For: wire.WaitLog, Pattern: "tail-mark"})
		decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+q.ID+"/logs", nil, as(unset)...), http.StatusOK, &logs)
		if logs.Start != 0 || logs.Next != 10011 {
			t.Fatalf("log with the runner's default: start %d next %d", logs.Start, logs.Next)
		}
	})

	t.Run("terminals", func(t *testing.T) {
		create := func(g wire.Grant) *http.Response {
			return h.doJSON(t, http.MethodPost, "/v1/sandbox/terminals", wire.TermCreateRequest{Command: "sleep", Args: []string{"1000"}}, as(g)...)
		}
		decode(t, create(limited), http.StatusCreated, nil)
		refused(t, create(limited), wire.ResourceExhausted, "max_terminals", 1)
		decode(t, create(unset), http.StatusCreated, nil)
		if runner.MaxTerminals < 3 {
			t.Fatalf("the default of %d terminals is too small for this test", runner.MaxTerminals)
		}
	})

	t.Run("file watches", func(t *testing.T) {
		decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs", nil, as(limited)...), http.StatusOK, nil) // the grant is the runner's newest
		watchStream(t, h, "path=.")
		resp := h.do(t, http.MethodGet, "/v1/sandbox/files/watch?path=.", nil, append(as(limited), "Accept", "text/event-stream")...)
		refused(t, resp, wire.ResourceExhausted, "max_file_watches", 1)
		decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs", nil, as(unset)...), http.StatusOK, nil)
		watchStream(t, h, "path=.") // the default (8) lets a second one in
	})

	t.Run("tasks", func(t *testing.T) {
		post := func(g wire.Grant, prompt string) *http.Response {
			return h.do(t, http.MethodPost, "/v1/execute", strings.NewReader(`{"prompt":"`+prompt+`"}`), as(g)...)
		}
		var first task
		decode(t, post(limited, "wait for ever"), http.StatusAccepted, &first)
		refused(t, post(limited, "one too many"), wire.ConcurrencyLimit, "max_tasks", 1)
		decode(t, post(unset, "wait for ever"), http.StatusAccepted, nil) // -max-tasks (3) again
		decode(t, post(unset, "wait for ever"), http.StatusAccepted, nil)
		refused(t, post(unset, "one too many"), wire.ConcurrencyLimit, "max_tasks", 3)
	})

	// The SDK sees the refusal as resource_exhausted too.
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/procs", nil, as(limited)...), http.StatusOK, nil)
	_, err = h.sandboxClient(t).CreateTerminal(context.Background(), warren.TerminalRequest{Command: "sleep", Args: []string{"1000"}})
	if !warren.IsCode(err, warren.CodeResourceExhausted) {
		t.Fatalf("SDK terminal over max_terminals: %v", err)
	}
}
