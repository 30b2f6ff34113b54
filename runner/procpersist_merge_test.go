package runner_test

import (
	"bytes"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// A record that could not be read at wake is merged into the next one: the old record's logs (up to 1 MiB)
// and the new runner's (up to 1 MiB again) must still fit the bound the decoder checks, or the merged record
// is refused as corrupt at the next wake and every kept process is lost. The oldest are left out instead.
// The env values a client passed are not in the record (they are not part of ProcInfo).
func TestProcTableMergedRecordStaysWithinTheLogBound(t *testing.T) {
	base := t.TempDir()
	limit := func(c *runner.Config) { c.MaxProcesses = 10 }
	const fill = "head -c 65536 /dev/zero | tr '\\0' y"
	h, sleep := keptRunner(t, base, 7, limit)
	secret := h.startProc(t, wire.ProcStartRequest{Command: "true", Env: map[string]string{"TOKEN": "s3cret-env-value"}})
	h.waitProc(t, secret.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	for range 15 {
		p := h.startProc(t, wire.ProcStartRequest{Command: fill})
		h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
	}
	sleep()
	key := keptKey(base)
	if b, err := os.ReadFile(key); err != nil {
		t.Fatal(err)
	} else if bytes.Contains(b, []byte("s3cret-env-value")) {
		t.Fatal("the kept table holds an env value a client passed")
	}
	if err := os.Rename(key, key+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(key, 0o700); err != nil {
		t.Fatal(err)
	}

	h, sleep = keptRunner(t, base, 8, func(c *runner.Config) { c.MaxProcesses, c.ProcessKeepAwake = 10, time.Hour })
	var newer []string
	for range 4 {
		p := h.startProc(t, wire.ProcStartRequest{Command: fill})
		h.waitProc(t, p.ID, wire.ProcWaitRequest{For: wire.WaitExit})
		newer = append(newer, p.ID)
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(key+".aside", key); err != nil {
		t.Fatal(err)
	}
	// A running process keeps the sandbox awake until the record is back in place.
	last := h.startProc(t, wire.ProcStartRequest{Command: "exec sleep 1000"})
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/procs/"+last.ID+"/signal", wire.ProcSignalRequest{Signal: "KILL"}), http.StatusOK, nil)
	newer = append(newer, last.ID)
	sleep()

	h, _ = keptRunner(t, base, 9, limit)
	if !h.metric(t, `warren_runner_process_table_loads_total{outcome="loaded"} 1`) {
		t.Fatal("the merged record was not loaded")
	}
	procs := h.listProcs(t)
	var total int64
	for _, p := range procs {
		total += p.LogEnd - p.LogStart
	}
	if total > 1<<20 {
		t.Fatalf("%d bytes of logs kept", total)
	}
	if len(procs) < len(newer) || procs[len(procs)-1].ID != last.ID {
		t.Fatalf("kept %d processes, want the newest runner's %v last", len(procs), newer)
	}
	for i, id := range newer {
		if got := procs[len(procs)-len(newer)+i].ID; got != id {
			t.Fatalf("process %d of the newest runner is %s, want %s", i, got, id)
		}
	}
}
