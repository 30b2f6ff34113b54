package runner_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// metricLine waits until /metrics has line (the followers gauge moves as requests arrive).
func (h *harness) metricLine(t *testing.T, line string) {
	t.Helper()
	for {
		b, _ := io.ReadAll(h.do(t, http.MethodGet, "/metrics", nil).Body)
		if strings.Contains(string(b), line+"\n") {
			return
		}
		if !strings.Contains(string(b), "warren_runner_process_followers{") {
			t.Fatal("metrics lack warren_runner_process_followers")
		}
	}
}

// A tenant cannot open requests following a process without bound: each waits for a port polls the
// sandbox's socket tables (which the tenant can make large) every 50 ms, each logs stream holds a
// goroutine and a connection. Waits for a port are capped at 4 a sandbox, logs streams and waits together
// at 64; past either, resource_exhausted with details.limit. A slot freed is usable again.
func TestProcessFollowersBounded(t *testing.T) {
	h := startRunner(t)
	p := h.startProc(t, wire.ProcStartRequest{Command: "sleep 1000"})
	done := make(chan *http.Response, 4)
	for range 4 {
		go func() {
			done <- h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/wait", wire.ProcWaitRequest{For: wire.WaitPort, Port: 1, TimeoutMs: 600_000})
		}()
	}
	h.metricLine(t, `warren_runner_process_followers{kind="port"} 4`)
	e := wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/wait", wire.ProcWaitRequest{For: wire.WaitPort, Port: 2, TimeoutMs: 1}), wire.ResourceExhausted)
	if e.Details["limit"] != float64(4) {
		t.Fatalf("refusal %+v", e)
	}
	var streams []*http.Response
	for range 64 - 4 {
		resp := h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID+"/logs", nil, "Accept", "text/event-stream")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("logs stream: %s", resp.Status)
		}
		streams = append(streams, resp)
	}
	h.metricLine(t, `warren_runner_process_followers{kind="all"} 64`)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID+"/logs", nil, "Accept", "text/event-stream"), wire.ResourceExhausted)
	wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/wait", wire.ProcWaitRequest{For: wire.WaitExit, TimeoutMs: 1}), wire.ResourceExhausted)
	// Plain (JSON) logs reads are not following: still answered.
	if resp := h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID+"/logs", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("logs read: %s", resp.Status)
	}
	streams[0].Body.Close()
	h.metricLine(t, `warren_runner_process_followers{kind="all"} 63`)
	resp := h.do(t, http.MethodGet, "/v1/sandbox/procs/"+p.ID+"/logs", nil, "Accept", "text/event-stream")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("logs stream after one closed: %s", resp.Status)
	}
	streams = append(streams[1:], resp)
	// Killing the process ends the waits (conflict: exited first) and the streams (exit event).
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, &wire.ProcInfo{})
	for range 4 {
		wantError(t, <-done, wire.Conflict)
	}
	for _, s := range streams {
		readLogEvents(t, s.Body)
		s.Body.Close()
	}
	h.metricLine(t, `warren_runner_process_followers{kind="all"} 0`)
}

// Waits for a regular expression (matched in the runner against every line of output) are capped at 4 a
// sandbox too.
func TestProcessRegexWaitsBounded(t *testing.T) {
	h := startRunner(t)
	p := h.startProc(t, wire.ProcStartRequest{Command: "sleep 1000"})
	re := wire.ProcWaitRequest{For: wire.WaitLog, Pattern: `never (\d+)`, Regex: true, TimeoutMs: 600_000}
	done := make(chan *http.Response, 4)
	for range 4 {
		go func() { done <- h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/wait", re) }()
	}
	h.metricLine(t, `warren_runner_process_followers{kind="regex"} 4`)
	e := wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/wait", re), wire.ResourceExhausted)
	if e.Details["limit"] != float64(4) {
		t.Fatalf("refusal %+v", e)
	}
	// A plain pattern is not limited so.
	plain := re
	plain.Regex, plain.TimeoutMs = false, 1
	wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/wait", plain), wire.Timeout)
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+p.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, &wire.ProcInfo{})
	for range 4 {
		wantError(t, <-done, wire.Conflict)
	}
	h.metricLine(t, `warren_runner_process_followers{kind="regex"} 0`)
}
