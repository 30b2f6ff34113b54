package devstack_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/registry"
	warren "github.com/warren-mesh/warren/sdk"
)

// A background process that dies with the sandbox's sleep is listed after the wake, through the edge: exited,
// ended by the stop, with its log. The table comes back from the blob store (the sandbox's local state is
// removed while it sleeps), as it would in another region.
func TestProcTableKeptThroughSleepAndWake(t *testing.T) {
	st := startStack(t, func(c *devstack.Config) {
		c.IdleTimeout = time.Second
		c.RunnerArgs = append(c.RunnerArgs, "-process-keep-awake", "1s")
	})
	ctx := ctxT(t)
	c := client(t, st, "pia")
	sb := c.Sandbox()
	p, err := sb.StartProcess(ctx, warren.ProcStartRequest{Command: "echo dev server up; exec sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.WaitProcess(ctx, p.ID, warren.ProcWaitRequest{For: warren.WaitLog, Pattern: "dev server up"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the sandbox to sleep", func() bool {
		_, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "pia")
		return errors.Is(err, registry.ErrNotFound)
	})
	sbDir := filepath.Join(st.Config().DataDir, "sandboxes", registry.SandboxID(devstack.DevIssuer, "pia"))
	if err := os.RemoveAll(filepath.Join(sbDir, "state")); err != nil {
		t.Fatal(err)
	}
	procs, err := sb.Processes(ctx) // wakes the sandbox
	if err != nil {
		t.Fatalf("list after wake: %v", err)
	}
	if len(procs) != 1 || procs[0].ID != p.ID || procs[0].Status != warren.ProcExited || procs[0].Ended != "sandbox_stopped" {
		t.Fatalf("processes after wake: %+v, want %s exited by the stop", procs, p.ID)
	}
	logs, err := sb.ProcessLogs(ctx, p.ID, 0)
	if err != nil || len(logs.Chunks) == 0 || !strings.Contains(logs.Chunks[0].Data, "dev server up") {
		t.Fatalf("logs after wake: %+v, %v", logs, err)
	}
}
