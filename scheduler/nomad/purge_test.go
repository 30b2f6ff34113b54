package nomad

//lint:file-ignore SA1019 Nomad 1.6 and 1.7 read only the deprecated stop_after_client_disconnect, so it is set beside the disconnect block (README: Nomad, Consul and Vault versions)

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/warren-mesh/warren/internal/registry/mem"
)

// purgingNomad plays the part of Nomad's HTTP API that Stop uses, as documented for Nomad 1.6.6/1.7.3 and
// later (hashicorp/nomad#19609): a purge deletes the job's allocations from the server's state at once,
// and a blocking query on a deleted allocation is not woken by the deletion (it answers when its wait is
// up). Nomad 1.6.1, which the other tests of this package run, keeps a purged job's allocations until
// garbage collection, so this narrow stand-in is how the driver's reaction to the newer answers is pinned.
type purgingNomad struct {
	t     *testing.T
	jobID string
	alloc string
	grace time.Duration // from deregistration to the allocation's completion (the runner's graceful stop)
	// vanishOnDeregister: the deregistration deletes the allocation at once (another purge got there first).
	vanishOnDeregister bool

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when index moves
	index    uint64
	status   string // client status
	desired  string
	deleted  bool
	calls    []string // "deregister", "purge"
	purgedAt string   // the allocation's client status when the purge came
}

func newPurgingNomad(t *testing.T, jobID, alloc string) *purgingNomad {
	return &purgingNomad{t: t, jobID: jobID, alloc: alloc, grace: 300 * time.Millisecond, changed: make(chan struct{}),
		index: 10, status: api.AllocClientStatusRunning, desired: api.AllocDesiredStatusRun}
}

// bump moves the index and wakes the blocking queries; callers hold mu.
func (n *purgingNomad) bump() {
	n.index++
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *purgingNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/allocation/"+n.alloc:
		n.block(r)
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.deleted {
			http.Error(w, "alloc not found", http.StatusNotFound)
			return
		}
		n.reply(w, &api.Allocation{ID: n.alloc, JobID: n.jobID, ClientStatus: n.status, DesiredStatus: n.desired})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/job/"+n.jobID+"/allocations":
		n.block(r)
		n.mu.Lock()
		defer n.mu.Unlock()
		stubs := []*api.AllocationListStub{}
		if !n.deleted {
			stubs = append(stubs, &api.AllocationListStub{ID: n.alloc, JobID: n.jobID, ClientStatus: n.status, DesiredStatus: n.desired})
		}
		n.reply(w, stubs)
	case r.Method == http.MethodDelete && r.URL.Path == "/v1/job/"+n.jobID:
		n.mu.Lock()
		defer n.mu.Unlock()
		if r.URL.Query().Get("purge") == "true" {
			n.calls = append(n.calls, "purge")
			n.purgedAt = n.status
			n.deleted = true // no bump: the deletion wakes no blocking query
		} else {
			n.calls = append(n.calls, "deregister")
			n.desired = api.AllocDesiredStatusStop
			if n.vanishOnDeregister {
				n.deleted = true
			} else {
				time.AfterFunc(n.grace, func() {
					n.mu.Lock()
					defer n.mu.Unlock()
					if !n.deleted {
						n.status = api.AllocClientStatusComplete
						n.bump()
					}
				})
			}
			n.bump()
		}
		n.reply(w, &api.JobDeregisterResponse{EvalID: "e1"})
	default:
		n.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.Error(w, "unexpected", http.StatusBadRequest)
	}
}

// block holds a blocking query (?index=N&wait=D) until the index passes N or the wait is up, as Nomad does.
func (n *purgingNomad) block(r *http.Request) {
	min, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if min == 0 {
		return
	}
	wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
	if err != nil || wait <= 0 {
		wait = 5 * time.Minute
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		n.mu.Lock()
		index, changed := n.index, n.changed
		n.mu.Unlock()
		if index > min {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (n *purgingNomad) reply(w http.ResponseWriter, v any) {
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(n.index, 10))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (n *purgingNomad) log() (calls []string, purgedAt string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...), n.purgedAt
}

// fakeDriver is a driver of the Nomad stand-in at url, closed when t ends.
func fakeDriver(t *testing.T, url string) *Driver {
	t.Helper()
	client, err := api.NewClient(&api.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Client: client, Registry: mem.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestStopOnANomadWhosePurgeDeletesAllocations(t *testing.T) {
	sp := spec("iss", "alice")
	jobID := JobID(sp)
	const alloc = "5c6328f7-48c5-4d03-bada-91ef2e904d0d"
	for _, tc := range []struct {
		name      string
		vanish    bool
		wantCalls string
		minStop   time.Duration
	}{
		// Deregister, wait out the runner's grace, purge only once the allocation is complete.
		{"GraceThenPurge", false, "deregister purge", 300 * time.Millisecond},
		// An allocation that vanishes while Stop waits counts as terminal.
		{"AllocationVanishes", true, "deregister purge", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newPurgingNomad(t, jobID, alloc)
			n.vanishOnDeregister = tc.vanish
			srv := httptest.NewServer(n)
			defer srv.Close()
			d := fakeDriver(t, srv.URL)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sb, err := d.Adopt(ctx, sp, alloc)
			if err != nil {
				t.Fatal(err)
			}
			// Let the watch settle into its blocking query on the running allocation.
			time.Sleep(100 * time.Millisecond)

			begin := time.Now()
			if err := d.Stop(ctx, alloc); err != nil {
				t.Fatalf("Stop = %v", err)
			}
			took := time.Since(begin)
			if took < tc.minStop {
				t.Errorf("Stop returned after %v, before the runner's grace of %v was over", took, tc.minStop)
			}
			if took > 3*time.Second {
				t.Errorf("Stop took %v: it blocked on a deleted allocation", took)
			}
			select {
			case <-sb.Exited:
			case <-time.After(time.Second):
				t.Fatal("Exited not closed within 1s of Stop (the watch's query on the deleted allocation hangs for its wait)")
			}
			calls, purgedAt := n.log()
			if got := strings.Join(calls, " "); got != tc.wantCalls {
				t.Errorf("Nomad saw %q, want %q", got, tc.wantCalls)
			}
			if !tc.vanish && purgedAt != api.AllocClientStatusComplete {
				t.Errorf("purged while the allocation was %q, want complete", purgedAt)
			}
		})
	}
}

// A server that validates stop_after_client_disconnect and disconnect.stop_on_client_after as exclusive gets
// the disconnect block alone; the first registration carries both.
func TestRegisterRetriesWithoutTheDeprecatedDisconnectField(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.JobRegisterRequest
		if r.URL.Path != "/v1/jobs" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		tg := req.Job.TaskGroups[0]
		mu.Lock()
		seen = append(seen, strconv.FormatBool(tg.StopAfterClientDisconnect != nil)+"/"+strconv.FormatBool(tg.Disconnect != nil && tg.Disconnect.StopOnClientAfter != nil))
		mu.Unlock()
		if tg.StopAfterClientDisconnect != nil && tg.Disconnect != nil {
			http.Error(w, "1 error occurred:\n\t* Task group sandbox validation failed: using both stop_after_client_disconnect and disconnect.stop_on_client_after is not allowed", http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode(api.JobRegisterResponse{EvalID: "e1"})
	}))
	defer srv.Close()
	d := fakeDriver(t, srv.URL)
	after := time.Minute
	job := &api.Job{ID: new("sandbox-x-e1"), TaskGroups: []*api.TaskGroup{{Name: new("sandbox"), StopAfterClientDisconnect: &after}}}
	setDisconnect(job)
	if got := *job.TaskGroups[0].Disconnect.StopOnClientAfter; got != time.Minute {
		t.Fatalf("disconnect.stop_on_client_after = %v, want the template's 1m", got)
	}
	evalID, err := d.register(context.Background(), job)
	if err != nil || evalID != "e1" {
		t.Fatalf("register = %q, %v", evalID, err)
	}
	if got := strings.Join(seen, " "); got != "true/true false/true" {
		t.Fatalf("registrations (stop_after_client_disconnect/disconnect) %s, want both first, then the block alone", got)
	}
	// Any other refusal is not retried.
	if dropDeprecatedDisconnect(job, errors.New("stop_after_client_disconnect")) {
		t.Error("a non-HTTP error dropped the field")
	}
}
