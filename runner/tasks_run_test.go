package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

type task = wire.TaskOf[runner.Cost]

func (h *harness) task(t *testing.T, id string) task {
	t.Helper()
	var tk task
	decode(t, h.do(t, http.MethodGet, "/v1/execute/"+id, nil), http.StatusOK, &tk)
	return tk
}

// The task table under concurrency (run with -race): a task past its time is interrupted and fails with
// timeout, simultaneous requests with one Idempotency-Key make one task, the quota of queued and running
// tasks refuses one more, queued tasks run in turn, and a second runner on the same store (the sandbox
// restarted) answers the tasks and the key from the store, a task left running by the first as failed.
func TestTasksQueueIdempotencyAndRestart(t *testing.T) {
	store, err := blobfs.New(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	withTasks := func(c *runner.Config) {
		c.Agent = scriptedAgent{}
		c.Snapshots, c.SnapshotPrefix = store, "sandboxes/alice"
		c.Tasks = runner.TaskConfig{MaxActive: 3}
	}
	h := startRunner(t, withTasks)
	post := func(body, key string) *http.Response {
		var hdr []string
		if key != "" {
			hdr = []string{"Idempotency-Key", key}
		}
		return h.do(t, http.MethodPost, "/v1/execute", strings.NewReader(body), hdr...)
	}
	var slow task
	decode(t, post(`{"prompt":"wait for ever","timeoutMs":300}`, ""), http.StatusAccepted, &slow)

	var (
		wg  sync.WaitGroup
		ids = make([]string, 6)
	)
	for i := range ids {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/execute", strings.NewReader(`{"prompt":"hi"}`))
			req.Header.Set("Authorization", "Bearer "+h.key)
			req.Header.Set("Idempotency-Key", "same")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var tk task
			if err := json.NewDecoder(resp.Body).Decode(&tk); err != nil || resp.StatusCode/100 != 2 {
				t.Errorf("concurrent POST: %d %v", resp.StatusCode, err)
				return
			}
			ids[i] = tk.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("one key made tasks %q", ids)
		}
	}
	var third task
	decode(t, post(`{"prompt":"hi again"}`, ""), http.StatusAccepted, &third)
	if e := wantError(t, post(`{"prompt":"one too many"}`, ""), wire.ConcurrencyLimit); e.Details["limit"] != float64(3) {
		t.Fatalf("quota error details %v", e.Details)
	}

	for _, id := range []string{slow.ID, ids[0], third.ID} {
		waitFor(t, "task "+id, func() bool { tk := h.task(t, id); return tk.Done() })
	}
	if tk := h.task(t, slow.ID); tk.Status != wire.TaskFailed || tk.Error == nil || tk.Error.Code != wire.Timeout {
		t.Fatalf("slow task: %+v", tk)
	}
	for _, id := range []string{ids[0], third.ID} {
		if tk := h.task(t, id); tk.Status != wire.TaskSucceeded || tk.Subtype != "success" || tk.SessionID == "" {
			t.Fatalf("task %s: %+v", id, tk)
		}
	}
	var list struct{ Tasks []task }
	decode(t, h.do(t, http.MethodGet, "/v1/execute?limit=2", nil), http.StatusOK, &list)
	if len(list.Tasks) != 2 || list.Tasks[0].CreatedAt.Before(list.Tasks[1].CreatedAt) {
		t.Fatalf("listing: %+v", list.Tasks)
	}
	wantError(t, h.do(t, http.MethodGet, "/v1/execute?limit=1000", nil), wire.InvalidArgument)

	// A record left running by a runner that stopped.
	stale := task{ID: "t-aaaaaaaaaaaaaaaaaaaaaaaaaa", Status: wire.TaskRunning, Prompt: "x", CreatedAt: time.Now()}
	b, _ := json.Marshal(stale)
	if err := store.Put(context.Background(), "sandboxes/alice/tasks/"+stale.ID+".json", bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	h2 := startRunner(t, withTasks)
	if tk := h2.task(t, stale.ID); tk.Status != wire.TaskFailed || tk.Error == nil || tk.Error.Code != wire.Unavailable {
		t.Fatalf("stale task: %+v", tk)
	}
	resp := h2.do(t, http.MethodPost, "/v1/execute", strings.NewReader(`{"prompt":"hi","wait":true}`), "Idempotency-Key", "same")
	var replayed task
	decode(t, resp, http.StatusOK, &replayed)
	if replayed.ID != ids[0] || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("key after restart: %+v %v", replayed, resp.Header)
	}
	wantError(t, h2.do(t, http.MethodPost, "/v1/execute", strings.NewReader(`{"prompt":"other"}`), "Idempotency-Key", "same"), wire.Conflict)
	wantError(t, h2.do(t, http.MethodGet, "/v1/execute/t-bbbbbbbbbbbbbbbbbbbbbbbbbb", nil), wire.NotFound)
}
