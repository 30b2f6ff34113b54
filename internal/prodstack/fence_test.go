package prodstack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/stacktest"
	"github.com/warren-mesh/warren/internal/testenv"
)

// runnerProc is a `warren runner -consul` started by hand, as Nomad would.
type runnerProc struct {
	cmd    *exec.Cmd
	logs   *stacktest.SyncBuffer
	exited chan error
}

func startRunner(t *testing.T, bin, consulAddr string, epoch int64, alloc string) *runnerProc {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, "runner", "-issuer", "acme", "-user", "fenced", "-epoch", fmt.Sprint(epoch),
		"-alloc", alloc, "-consul", consulAddr, "-workspace", filepath.Join(dir, "ws"), "-state-dir", filepath.Join(dir, "state"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &runnerProc{cmd: cmd, logs: &stacktest.SyncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l struct{ Event string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Event == "ready" {
				close(ready)
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("runner epoch %d log:\n%s", epoch, stacktest.Tail(p.logs.String(), 4000))
		}
	})
	select {
	case <-ready:
	case err := <-p.exited:
		t.Fatalf("runner epoch %d exited before ready: %v\n%s", epoch, err, p.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("runner epoch %d not ready", epoch)
	}
	return p
}

// TestRunnerFencesItself: a runner whose owner lock is lost — here because a runner of the next epoch took
// its user over — stops and exits with an error on its own (docs/ARCHITECTURE.md#self-fencing); the new owner
// stays.
func TestRunnerFencesItself(t *testing.T) {
	cs := testenv.StartConsul(t)
	bin := testenv.WarrenBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := consul.New(consul.Config{Addr: cs.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())

	old := startRunner(t, bin, cs.Addr(), 1, "alloc-1")
	if e, err := reg.Lookup(ctx, "acme", "fenced"); err != nil || e.Epoch != 1 {
		t.Fatalf("Lookup = %+v, %v; want epoch 1", e, err)
	}
	second := startRunner(t, bin, cs.Addr(), 2, "alloc-2")
	select {
	case err := <-old.exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(old.logs.String(), "fenced") {
			t.Fatalf("old runner exited with %v; want a non-zero exit saying it fenced itself:\n%s", err, stacktest.Tail(old.logs.String(), 2000))
		}
	case <-ctx.Done():
		t.Fatal("the runner of epoch 1 kept running after epoch 2 took its lock")
	}
	if e, err := reg.Lookup(ctx, "acme", "fenced"); err != nil || e.Epoch != 2 || e.Alloc != "alloc-2" {
		t.Fatalf("after takeover Lookup = %+v, %v; want epoch 2 on alloc-2", e, err)
	}

	// A lock lost without a successor (the session destroyed by an operator, or expired): same ending.
	cur := second
	api, err := consulapi.NewClient(&consulapi.Config{Address: cs.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	pair, _, err := api.KV().Get("warren/owners/"+registry.SandboxID("acme", "fenced"), nil)
	if err != nil || pair == nil || pair.Session == "" {
		t.Fatalf("owner key: %+v, %v", pair, err)
	}
	if _, err := api.Session().Destroy(pair.Session, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cur.exited:
		if err == nil || !strings.Contains(cur.logs.String(), "fenced") {
			t.Fatalf("runner exited with %v after losing its session; want a fenced exit", err)
		}
	case <-ctx.Done():
		t.Fatal("the runner kept running after its session was destroyed")
	}
}
