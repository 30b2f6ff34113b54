package nomad_test

//lint:file-ignore SA1019 Nomad 1.6 and 1.7 read only the deprecated stop_after_client_disconnect, so it is set beside the disconnect block (README: Nomad, Consul and Vault versions)

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/drivertest"
	"github.com/warren-mesh/warren/scheduler/nomad"
)

// cluster is one real Consul and one real Nomad dev agent (raw_exec) with the real warren binary: what the
// tests of this file share.
type cluster struct {
	nomad  *testenv.NomadServer
	consul *testenv.ConsulServer
	client *api.Client
	reg    *consul.Registry
	binary string
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	cs := testenv.StartConsul(t) // first: it skips under -short
	binary := testenv.WarrenBinary(t)
	ns := testenv.StartNomad(t, testenv.NomadOptions{ConsulAddr: cs.Addr()})
	client, err := api.NewClient(&api.Config{Address: ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := consul.New(consul.Config{Addr: cs.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	return &cluster{nomad: ns, consul: cs, client: client, reg: reg, binary: binary}
}

// driver returns a driver of c whose runners register in c's Consul. The runners keep bubblewrap: as root
// inside raw_exec it works as it does under warren dev.
func (c *cluster) driver(t testing.TB, edit func(*nomad.Config)) *nomad.Driver {
	t.Helper()
	cfg := nomad.Config{
		Client: c.client, Registry: c.reg, Binary: c.binary,
		RunnerArgs: []string{"-consul", c.consul.Addr()},
		CPU:        100, MemoryMB: 128, KillTimeout: 40 * time.Second,
	}
	if edit != nil {
		edit(&cfg)
	}
	d, err := nomad.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestNomad(t *testing.T) {
	c := startCluster(t)
	reg := prometheus.NewRegistry()
	d := c.driver(t, func(cfg *nomad.Config) { cfg.Metrics = reg })

	t.Run("Contract", func(t *testing.T) {
		drivertest.Run(t, d)
		// Three successful starts, one abandoned before it began.
		if n := histogramCount(t, reg, "warren_nomad_sandbox_start_seconds"); n != 3 {
			t.Errorf("start latency observations = %d, want 3", n)
		}
		if n := counter(t, reg, "warren_nomad_sandbox_start_failures_total", "cancelled"); n != 1 {
			t.Errorf("failures{reason=cancelled} = %v, want 1", n)
		}
	})

	t.Run("JobIsTheTemplate", func(t *testing.T) {
		spec := drivertest.Spec("r1")
		job, err := d.Job(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if *job.ID != nomad.JobID(spec) || *job.Type != "batch" {
			t.Fatalf("job %s of type %s", *job.ID, *job.Type)
		}
		tg := job.TaskGroups[0]
		task := tg.Tasks[0]
		if *tg.RestartPolicy.Attempts != 0 || *tg.RestartPolicy.Mode != "fail" || *tg.ReschedulePolicy.Attempts != 0 || *tg.ReschedulePolicy.Unlimited {
			t.Fatalf("restart %+v reschedule %+v: Nomad must neither restart nor reschedule a sandbox", *tg.RestartPolicy, *tg.ReschedulePolicy)
		}
		// The disconnect policy in the fields of both Nomad lines (see checkStoredDisconnect).
		if tg.StopAfterClientDisconnect == nil || *tg.StopAfterClientDisconnect != time.Minute ||
			tg.Disconnect == nil || tg.Disconnect.StopOnClientAfter == nil || *tg.Disconnect.StopOnClientAfter != time.Minute {
			t.Fatalf("stop_after_client_disconnect %s, disconnect %+v: want 1m in both", fmtDuration(tg.StopAfterClientDisconnect), tg.Disconnect)
		}
		if *task.KillTimeout != 40*time.Second || task.KillSignal != "SIGTERM" {
			t.Fatalf("kill %s after %v", task.KillSignal, *task.KillTimeout)
		}
		if *task.Resources.CPU != 100 || *task.Resources.MemoryMB != 128 {
			t.Fatalf("resources %d MHz %d MiB", *task.Resources.CPU, *task.Resources.MemoryMB)
		}
		args := fmt.Sprint(task.Config["args"])
		for _, want := range []string{"-user " + spec.User, "-epoch 1", "-alloc ${NOMAD_ALLOC_ID}", "-consul " + c.consul.Addr()} {
			if !strings.Contains(args, want) {
				t.Errorf("runner args %s lack %q", args, want)
			}
		}
		if job.Meta["warren_user"] != spec.User || job.Meta["warren_epoch"] != "1" {
			t.Errorf("meta %v", job.Meta)
		}
	})

	// Runners keep their bubblewrap boundary inside raw_exec: a command sees its own PID namespace.
	t.Run("CommandsRunUnderBubblewrap", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sb, err := d.Start(ctx, drivertest.Spec("r1"))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop(context.Background(), sb.Alloc)
		body, _ := json.Marshal(wire.ExecRequest{Command: "sh", Args: []string{"-c", "echo $$"}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+sb.Addr+"/v1/sandbox/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+sb.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res wire.ExecResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("exec: %d %v", resp.StatusCode, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
		if res.ExitCode != 0 || err != nil || pid > 10 {
			t.Fatalf("exec in the sandbox: exit %d, stdout %q, stderr %q: want a low pid of its own PID namespace", res.ExitCode, res.Stdout, res.Stderr)
		}
	})

	t.Run("RegistrationIsIdempotent", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		spec := drivertest.Spec("r1")
		a, err := d.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop(context.Background(), a.Alloc)
		b, err := d.Start(ctx, spec)
		if err != nil {
			t.Fatalf("second Start of the same spec: %v", err)
		}
		if a.Alloc != b.Alloc || a.Addr != b.Addr || a.Key != b.Key {
			t.Fatalf("second Start gave another sandbox: %+v vs %+v", a, b)
		}
		job, _, err := c.client.Jobs().Info(nomad.JobID(spec), nil)
		if err != nil {
			t.Fatal(err)
		}
		if *job.Version != 0 {
			t.Fatalf("job version %d after registering the same spec twice, want 0", *job.Version)
		}
		checkStoredDisconnect(t, c.client, job)
	})

	// The Nomad client reads the runner's arguments as an HCL template with the node's attributes as
	// variables; the template escapes that, so any user string reaches the runner (and the registry) as is.
	t.Run("UserStringsArriveVerbatim", func(t *testing.T) {
		for _, user := range []string{
			`${attr.unique.hostname} ${NOMAD_ALLOC_ID} ${ env["HOME"] } %{ if true }x%{ endif } $${y} %%{z} $ % ~`,
			`o'brien "q" \back\ $HOME é ✓ ` + "\n\ttab ${",
		} {
			user := fmt.Sprintf("%s %d", user, time.Now().UnixNano())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			spec := scheduler.Spec{ID: registry.SandboxID("iss", user), Issuer: "iss", User: user, Epoch: 1, Region: "r1"}
			sb, err := d.Start(ctx, spec)
			if err != nil {
				t.Fatalf("user %q: %v", user, err)
			}
			e, err := c.reg.Lookup(ctx, "iss", user)
			if err != nil {
				t.Fatalf("the runner did not register under the user's exact string %q: %v", user, err)
			}
			if e.User != user || e.Alloc != sb.Alloc {
				t.Fatalf("registered %q alloc %s, want %q alloc %s", e.User, e.Alloc, user, sb.Alloc)
			}
			if err := d.Stop(ctx, sb.Alloc); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("StopGivesTheRunnerItsGraceAndWaits", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		spec := drivertest.Spec("r1")
		sb, err := d.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		lastStatus := watchStatus(t, c.client, sb.Alloc)
		if err := d.Stop(ctx, sb.Alloc); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sb.Exited:
		case <-time.After(time.Second):
			t.Fatal("Exited not closed within 1s of Stop")
		}
		// Nomad 1.6.6/1.7.3 and later delete a purged job's allocations: then the status is the last one seen.
		status := lastStatus()
		if a, _, err := c.client.Allocations().Info(sb.Alloc, nil); err == nil {
			status = a.ClientStatus
			if !a.ClientTerminalStatus() {
				t.Fatalf("Stop returned with the allocation %s", a.ClientStatus)
			}
		} else if !strings.Contains(err.Error(), "404") {
			t.Fatal(err)
		}
		// A runner that stopped gracefully exits 0 on SIGTERM: its allocation completes, it was not killed.
		if status != api.AllocClientStatusComplete {
			t.Fatalf("allocation %s after Stop, want complete (graceful exit)", status)
		}
		if conn, err := net.DialTimeout("tcp", sb.Addr, time.Second); err == nil {
			conn.Close()
			t.Fatalf("runner still listening on %s after Stop", sb.Addr)
		}
		if _, err := c.reg.Lookup(ctx, spec.Issuer, spec.User); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("registry entry after Stop: %v, want ErrNotFound", err)
		}
		if _, _, err := c.client.Jobs().Info(nomad.JobID(spec), nil); err == nil {
			t.Fatal("job still registered after Stop")
		}
	})

	t.Run("ExitedClosesOnOutsideStop", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		spec := drivertest.Spec("r1")
		sb, err := d.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop(context.Background(), sb.Alloc)
		cmd := exec.CommandContext(ctx, testenv.Binary(t, "nomad"), "job", "stop", "-detach", nomad.JobID(spec))
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.nomad.Addr())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nomad job stop: %v\n%s", err, out)
		}
		select {
		case <-sb.Exited:
		case <-ctx.Done():
			t.Fatal("Exited not closed after `nomad job stop`")
		}
		// The driver purges the job of an allocation that ended without Stop.
		waitFor(t, ctx, "the ended job to be purged", func() bool {
			_, _, err := c.client.Jobs().Info(nomad.JobID(spec), nil)
			return err != nil && strings.Contains(err.Error(), "404")
		})
	})

	t.Run("SupersededEpochFailsFast", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		spec := drivertest.Spec("r1")
		spec.Epoch = 2
		newer := registry.Entry{Issuer: spec.Issuer, User: spec.User, Epoch: 3, Region: "r1", Alloc: "other", Addr: "127.0.0.1:1", Key: "k"}
		if err := c.reg.Register(ctx, newer); err != nil {
			t.Fatal(err)
		}
		defer c.reg.Deregister(context.Background(), spec.Issuer, spec.User, 3)
		_, err := d.Start(ctx, spec)
		if err == nil || !(errors.Is(err, scheduler.ErrStaleEpoch) || errors.Is(err, nomad.ErrAllocationFailed)) {
			t.Fatalf("Start under a newer epoch = %v, want ErrStaleEpoch or ErrAllocationFailed", err)
		}
		if ctx.Err() != nil {
			t.Fatal("Start under a newer epoch waited for its context")
		}
	})
}

// A task that cannot start fails Start at once, with what Nomad said, and leaves no job behind.
func TestAllocationFailureSurfaces(t *testing.T) {
	c := startCluster(t)
	reg := prometheus.NewRegistry()
	d := c.driver(t, func(cfg *nomad.Config) {
		cfg.Binary = filepath.Join(t.TempDir(), "no-such-warren")
		cfg.Metrics = reg
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := drivertest.Spec("r1")
	_, err := d.Start(ctx, spec)
	if !errors.Is(err, nomad.ErrAllocationFailed) {
		t.Fatalf("Start with a missing binary = %v, want ErrAllocationFailed", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the failure surfaced only when the context ended: %v", err)
	}
	if !strings.Contains(err.Error(), "no-such-warren") && !strings.Contains(err.Error(), "no such file") {
		t.Errorf("error does not carry the task's events: %v", err)
	}
	if _, _, err := c.client.Jobs().Info(nomad.JobID(spec), nil); err == nil {
		t.Fatal("failed start left its job registered")
	}
	if n := counter(t, reg, "warren_nomad_sandbox_start_failures_total", "allocation_failed"); n != 1 {
		t.Fatalf("failures{reason=allocation_failed} = %v, want 1", n)
	}
}

// counter is the value of the counter name with reason label reason in reg (0 when absent).
func counter(t testing.TB, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// histogramCount is the number of observations of the histogram name in reg.
func histogramCount(t testing.TB, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func waitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// BenchmarkColdStart measures a new user's sandbox on Nomad: job registered → runner registered ready
// (Start), one user per iteration, with p50 and p95 reported. Stops are not timed.
//
//	go test -run '^$' -bench ColdStart -benchtime 10x ./scheduler/nomad
func BenchmarkColdStart(b *testing.B) {
	c := startCluster(b)
	d := c.driver(b, nil)
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		begin := time.Now()
		sb, err := d.Start(ctx, drivertest.Spec("r1"))
		took = append(took, time.Since(begin))
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		b.StopTimer()
		resp, err := http.Get("http://" + sb.Addr + "/healthz")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if err := d.Stop(ctx, sb.Alloc); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	b.ReportMetric(pct(0.50).Seconds(), "p50-s")
	b.ReportMetric(pct(0.95).Seconds(), "p95-s")
}

// watchStatus follows allocation id's client status until the test ends; the returned function is the last
// status seen before Nomad forgot the allocation (or the current one).
func watchStatus(t *testing.T, client *api.Client, id string) func() string {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var last string
	done := make(chan struct{})
	go func() {
		defer close(done)
		var index uint64
		for ctx.Err() == nil {
			a, meta, err := client.Allocations().Info(id, (&api.QueryOptions{WaitIndex: index, WaitTime: time.Second}).WithContext(ctx))
			if err != nil {
				if strings.Contains(err.Error(), "404") {
					return
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			mu.Lock()
			last = a.ClientStatus
			mu.Unlock()
			index = meta.LastIndex
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// checkStoredDisconnect checks the disconnect policy of job as the server stored it: Nomad before 1.8 keeps
// stop_after_client_disconnect (and drops the disconnect block it does not know), 1.8 and later keep
// disconnect.stop_on_client_after (1.10 ignores the old field). Only the first branch runs here (Nomad 1.6).
func checkStoredDisconnect(t *testing.T, client *api.Client, job *api.Job) {
	t.Helper()
	self, err := client.Agent().Self()
	if err != nil {
		t.Fatal(err)
	}
	build := self.Member.Tags["build"]
	var major, minor int
	if _, err := fmt.Sscanf(build, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("Nomad build %q: %v", build, err)
	}
	tg := job.TaskGroups[0]
	want := time.Minute // jobs/sandbox.nomad.hcl's default
	if major == 1 && minor < 8 {
		if tg.StopAfterClientDisconnect == nil || *tg.StopAfterClientDisconnect != want {
			t.Fatalf("Nomad %s stored stop_after_client_disconnect %v, want %v", build, fmtDuration(tg.StopAfterClientDisconnect), want)
		}
		return
	}
	if tg.Disconnect == nil || tg.Disconnect.StopOnClientAfter == nil || *tg.Disconnect.StopOnClientAfter != want {
		t.Fatalf("Nomad %s stored no disconnect.stop_on_client_after of %v: %+v", build, want, tg.Disconnect)
	}
}

func fmtDuration(d *time.Duration) string {
	if d == nil {
		return "none"
	}
	return d.String()
}
