// Package nomad is the production scheduler Driver: every sandbox is a Nomad job of its own, made from the
// job template jobs/sandbox.nomad.hcl, named after the hashed sandbox id and the placement epoch, and running
// one `warren runner`.
//
// The template is filled by Nomad itself: the driver sends the file to the /v1/jobs/parse endpoint with the
// spec as HCL2 variables (a JSON variables file, whose strings HCL takes verbatim), so the reviewed file and
// what runs cannot drift. Readiness is the registry: the runner generates its own bearer key and registers
// itself (address, key, epoch, allocation id) under its user's Consul lock; Start waits for that entry,
// failing fast, with the task's last events, when the allocation fails first.
//
// The epoch, not Nomad, is a sandbox's identity: the template restarts and reschedules nothing, and when an
// allocation ends without Stop (the runner slept, failed, or its node was lost) the driver deregisters its
// job so that Nomad does not place a replacement under the same epoch; the next connection claims a new one.
//
// The steps of Start (Job, register, awaitAllocation, awaitReady) are separate so that a warm pool can run
// the first ones ahead of demand.
package nomad

//lint:file-ignore SA1019 Nomad 1.6 and 1.7 read only the deprecated stop_after_client_disconnect, so it is set beside the disconnect block (README: Nomad, Consul and Vault versions)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/backoff"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/jobs"
	"github.com/warren-mesh/warren/scheduler"
)

// Config configures the Nomad driver.
type Config struct {
	Client   *api.Client       // required
	Registry registry.Registry // required: readiness (the runner registers itself)
	// Template is the sandbox job template (HCL2 with the variables of jobs/sandbox.nomad.hcl); default
	// jobs.Sandbox.
	Template    []byte
	Datacenters []string // default ["dc1"]
	Binary      string   // path of warren on the clients; default: the template's
	Driver      string   // task driver; default "raw_exec" ("exec" in production)
	// RunnerArgs are extra runner flags (e.g. -consul addr). The Nomad client interpolates them like the
	// rest of the task's config, so ${NOMAD_TASK_DIR} and the like work in them.
	RunnerArgs []string
	// Env is extra runner environment (no secrets: those come from Vault templates); values are
	// interpolated by the Nomad client too.
	Env      map[string]string
	CPU      int // MHz; 0: the template's default
	MemoryMB int // MiB; 0: the template's default
	// KillTimeout is the grace between SIGTERM and SIGKILL on Stop (the runner's graceful stop and final
	// snapshot); 0: the template's default (45s). Nomad caps it at the clients' max_kill_timeout.
	KillTimeout time.Duration
	// WebhookSecretPath is the Vault KV v2 path of the operator's task webhook secret the template renders
	// for the runner's -webhook-secret-file (its webhook_secret_path), logging in with VaultRole (its
	// vault_role; "": the template's default). "": none, task webhooks are refused.
	WebhookSecretPath string
	VaultRole         string
	// Pool, when its Size is > 0, keeps warm runners ready for Start to claim (pool.go).
	Pool    PoolConfig
	Logger  *slog.Logger
	Metrics prometheus.Registerer // nil: metrics are not registered
}

// Driver starts sandboxes as Nomad jobs. Safe for concurrent use.
type Driver struct {
	cfg     Config
	client  *api.Client
	log     *slog.Logger
	metrics driverMetrics
	poll    time.Duration // registry polling interval while waiting for a runner (20 ms: a start is short, and the poll is its granularity)

	bg      context.Context // ends with Close: the allocation watchers
	cancel  context.CancelFunc
	mu      sync.Mutex
	closed  bool
	watches map[string]*allocWatch // by allocation id, while followed
	wg      sync.WaitGroup
	pool    *pool // nil without a warm pool
}

var _ scheduler.Driver = (*Driver)(nil)

type driverMetrics struct {
	startSeconds prometheus.Histogram
	failures     *prometheus.CounterVec
}

// The reasons of failed starts, as metric labels.
const (
	reasonCancelled   = "cancelled"
	reasonUnavailable = "unavailable"
	reasonNoCapacity  = "no_capacity"
	reasonAllocFailed = "allocation_failed"
	reasonSuperseded  = "superseded"
	reasonInvalid     = "invalid"
	reasonOther       = "other"
)

// New checks cfg and returns a driver. Close it to stop its allocation watchers.
func New(cfg Config) (*Driver, error) {
	if cfg.Client == nil {
		return nil, errors.New("nomad driver: client is required")
	}
	if cfg.Registry == nil {
		return nil, errors.New("nomad driver: registry is required")
	}
	if len(cfg.Template) == 0 {
		cfg.Template = jobs.Sandbox
	}
	if len(cfg.Datacenters) == 0 {
		cfg.Datacenters = []string{"dc1"}
	}
	if cfg.Driver == "" {
		cfg.Driver = "raw_exec"
	}
	if cfg.CPU < 0 || cfg.MemoryMB < 0 || cfg.KillTimeout < 0 {
		return nil, errors.New("nomad driver: cpu, memory and kill timeout must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{cfg: cfg, client: cfg.Client, log: cfg.Logger, poll: 20 * time.Millisecond, watches: map[string]*allocWatch{}}
	d.metrics = driverMetrics{
		startSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warren_nomad_sandbox_start_seconds",
			Help:    "Time from a sandbox job's registration to its runner registering itself ready.",
			Buckets: prometheus.ExponentialBuckets(0.1, 1.6, 14),
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_nomad_sandbox_start_failures_total",
			Help: "Sandbox starts on Nomad that failed, by reason.",
		}, []string{"reason"}),
	}
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{d.metrics.startSeconds, d.metrics.failures} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("nomad driver: register metrics: %w", err)
			}
		}
	}
	d.bg, d.cancel = context.WithCancel(context.Background())
	if cfg.Pool.Size > 0 {
		p, err := d.startPool(cfg.Pool)
		if err != nil {
			d.cancel()
			return nil, err
		}
		d.pool = p
	}
	return d, nil
}

// Close stops watching allocations and waits for the watchers. Sandboxes keep running; their Exited
// channels are no longer closed. Idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	return nil
}

var _ scheduler.Adopter = (*Driver)(nil)

// JobID is the Nomad job id of spec's sandbox: derived from the hashed sandbox id and the epoch only.
func JobID(spec scheduler.Spec) string {
	return fmt.Sprintf("%s%s-e%d", jobPrefix, spec.ID, spec.Epoch)
}

const jobPrefix = "sandbox-"

// Start registers spec's sandbox job, waits for its allocation and then for its runner to register itself
// with spec's epoch. A start that fails or is abandoned by ctx deregisters and purges the job (taking up to
// 10 s more when Nomad does not answer). Starting a spec whose job runs already returns that sandbox (same
// allocation, same Exited); a failed or abandoned start of it ends it for every caller.
//
// The returned Exited is closed once Nomad reports the allocation terminal (complete, failed, lost) or
// forgets it; not while Nomad is unreachable, and no more once the driver is closed.
func (d *Driver) Start(ctx context.Context, spec scheduler.Spec) (sb scheduler.Sandbox, err error) {
	what := fmt.Sprintf("start sandbox %s epoch %d", spec.ID, spec.Epoch)
	defer func() {
		if err != nil {
			d.metrics.failures.WithLabelValues(reason(err)).Inc()
		}
	}()
	if err := ctx.Err(); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return sb, fmt.Errorf("%s: driver closed", what)
	}
	if err := CheckSpec(spec); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	if d.pool != nil {
		sb, ok, err := d.pool.claim(ctx, spec)
		if ok || err != nil {
			if err != nil {
				return sb, fmt.Errorf("%s from the warm pool: %w", what, err)
			}
			return sb, nil
		}
	}
	job, err := d.Job(ctx, spec)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	jobID := *job.ID
	log := d.log.With("job", jobID, "issuer", spec.Issuer, "user", spec.User, "epoch", spec.Epoch)
	begin := time.Now()
	evalID, err := d.register(ctx, job)
	if err != nil {
		d.abandon(ctx, jobID, log)
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	allocID, err := d.awaitAllocation(ctx, jobID, evalID)
	if err != nil {
		d.abandon(ctx, jobID, log)
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	w, err := d.watch(allocID, jobID)
	if err != nil {
		d.abandon(ctx, jobID, log)
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	entry, err := d.awaitReady(ctx, spec, w)
	if err != nil {
		w.stopping.Store(true)
		d.abandon(ctx, jobID, log)
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	took := time.Since(begin)
	d.metrics.startSeconds.Observe(took.Seconds())
	log.Info("sandbox ready", "alloc", allocID, "addr", entry.Addr, "seconds", took.Seconds())
	return scheduler.Sandbox{Alloc: allocID, Addr: entry.Addr, Key: entry.Key, Exited: w.done}, nil
}

// Adopt follows allocation alloc, which a previous scheduler process started (or claimed from the warm
// pool) for spec: its Exited is closed like a started sandbox's, and an allocation that ends is purged. An
// allocation Nomad no longer knows is scheduler.ErrNotFound; one that is not a sandbox's is
// scheduler.ErrNotASandbox.
func (d *Driver) Adopt(ctx context.Context, spec scheduler.Spec, alloc string) (scheduler.Sandbox, error) {
	what := fmt.Sprintf("adopt sandbox %s epoch %d", spec.ID, spec.Epoch)
	if alloc == "" {
		return scheduler.Sandbox{}, fmt.Errorf("%s: no allocation: %w", what, scheduler.ErrNotFound)
	}
	a, _, err := d.client.Allocations().Info(alloc, query(ctx, 0, 0))
	if isNotFound(err) {
		return scheduler.Sandbox{}, fmt.Errorf("%s: allocation %s: %w", what, alloc, scheduler.ErrNotFound)
	}
	if err != nil {
		return scheduler.Sandbox{}, fmt.Errorf("%s: %w", what, classify(err))
	}
	if !strings.HasPrefix(a.JobID, jobPrefix) {
		return scheduler.Sandbox{}, fmt.Errorf("%s: allocation %s belongs to job %q: %w", what, alloc, a.JobID, scheduler.ErrNotASandbox)
	}
	w, err := d.watch(alloc, a.JobID)
	if err != nil {
		return scheduler.Sandbox{}, fmt.Errorf("%s: %w", what, err)
	}
	return scheduler.Sandbox{Alloc: alloc, Exited: w.done}, nil
}

// Stop ends the sandbox of allocation alloc: it deregisters the job (Nomad stops the allocation with the
// task's kill_signal and kill_timeout: the runner's graceful stop), waits until the allocation is terminal
// or gone, closes the sandbox's Exited and only then purges the job. Nomad 1.6.6/1.7.3 and later delete a
// purged job's allocations from their state at once, so purging first would not wait for the runner (see
// end). When ctx ends first, the job is purged anyway (for up to 10 s more) and Stop returns ctx's error.
// A gone allocation is nil.
func (d *Driver) Stop(ctx context.Context, alloc string) error {
	if alloc == "" {
		return nil
	}
	a, _, err := d.client.Allocations().Info(alloc, query(ctx, 0, 0))
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop sandbox %s: %w", alloc, classify(err))
	}
	if !strings.HasPrefix(a.JobID, jobPrefix) {
		return fmt.Errorf("stop sandbox %s: allocation of job %q, not a sandbox", alloc, a.JobID)
	}
	d.mu.Lock()
	w := d.watches[alloc]
	if w != nil {
		w.stopping.Store(true)
	}
	d.mu.Unlock()
	if err := d.end(ctx, a.JobID, w); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", alloc, err)
	}
	return nil
}

// stopWait bounds the blocking queries of a stop: Nomad 1.6.6/1.7.3 and later delete the allocations of a
// purged job without waking the blocking queries that watch them (they return only when their wait time
// is up), so a stop never waits on one longer than this.
const stopWait = 5 * time.Second

// end deregisters jobID without purging it, waits until every allocation of the job is terminal (an
// allocation Nomad no longer knows counts as terminal), finishes w (when not nil) and then purges the job.
// When ctx ends before that, the job is purged anyway, with up to 10 s of its own, and ctx's error is
// returned. Only sandbox jobs are touched.
func (d *Driver) end(ctx context.Context, jobID string, w *allocWatch) error {
	if !strings.HasPrefix(jobID, jobPrefix) {
		return fmt.Errorf("deregister job %q: not a sandbox job", jobID)
	}
	_, _, err := d.client.Jobs().Deregister(jobID, false, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("deregister job %s: %w", jobID, classify(err))
	}
	waitErr := d.awaitTerminal(ctx, jobID)
	if waitErr == nil && w != nil {
		w.finish()
	}
	pctx := ctx
	if waitErr != nil {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	if err := d.purge(pctx, jobID); err != nil {
		return errors.Join(waitErr, err)
	}
	return waitErr
}

// awaitTerminal waits until no allocation of jobID may still run: each is terminal or Nomad no longer
// knows it (the job's allocation list is empty, or the job is gone).
func (d *Driver) awaitTerminal(ctx context.Context, jobID string) error {
	var index uint64
	retry := backoff.New(nomadRetryMin, nomadRetryMax)
	var last string
	for {
		stubs, meta, err := d.client.Jobs().Allocations(jobID, true, query(ctx, index, stopWait))
		switch {
		case isNotFound(err):
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("allocations of job %s still running (%s): %w", jobID, last, ctx.Err())
		case err != nil:
			d.log.Debug("watch stopping job", "job", jobID, "err", err)
			if !retry.Wait(ctx) {
				return fmt.Errorf("allocations of job %s: %w", jobID, ctx.Err())
			}
			continue
		}
		retry.Reset()
		running := slices.DeleteFunc(stubs, stubTerminal)
		if len(running) == 0 {
			return nil
		}
		last = fmt.Sprintf("allocation %s is %s/%s", running[0].ID, running[0].DesiredStatus, running[0].ClientStatus)
		index = nextIndex(index, meta)
	}
}

// stubTerminal reports whether the listed allocation s will not run (again), like terminal.
func stubTerminal(s *api.AllocationListStub) bool {
	if slices.Contains(terminalClientStatuses, s.ClientStatus) {
		return true
	}
	return tasksDead(s.TaskStates)
}

// Job renders spec's sandbox job: the template parsed by Nomad with spec and the driver's configuration as
// variables, canonicalized.
func (d *Driver) Job(ctx context.Context, spec scheduler.Spec) (*api.Job, error) {
	return d.job(ctx, spec, false)
}

// job renders spec's sandbox job, or with warm a warm-pool runner's (spec then holds placeholders).
func (d *Driver) job(ctx context.Context, spec scheduler.Spec, warm bool) (*api.Job, error) {
	if err := CheckSpec(spec); err != nil {
		return nil, err
	}
	vars, err := d.variables(spec, warm)
	if err != nil {
		return nil, err
	}
	job, err := d.client.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL: string(d.cfg.Template), Variables: vars, Canonicalize: true,
	})
	if err != nil {
		return nil, fmt.Errorf("parse sandbox job template: %w", classify(err))
	}
	if job.ID == nil || *job.ID != JobID(spec) {
		return nil, fmt.Errorf("sandbox job template names the job %q, want %q", deref(job.ID), JobID(spec))
	}
	setDisconnect(job)
	return job, nil
}

// setDisconnect gives every group of job that has a stop_after_client_disconnect the same policy as
// disconnect { stop_on_client_after }. The template must parse on Nomad 1.6, which has no disconnect block;
// Nomad 1.8 deprecated stop_after_client_disconnect for that block and 1.10 ignores it, silently. Nomad 1.6
// and 1.7 ignore the Disconnect field (it is not in their API), 1.8 and later read it: with both, every line
// honours the policy.
func setDisconnect(job *api.Job) {
	for _, tg := range job.TaskGroups {
		if tg.StopAfterClientDisconnect == nil || (tg.Disconnect != nil && tg.Disconnect.StopOnClientAfter != nil) {
			continue
		}
		after := *tg.StopAfterClientDisconnect
		if tg.Disconnect == nil {
			tg.Disconnect = &api.DisconnectStrategy{}
		}
		tg.Disconnect.StopOnClientAfter = &after
		tg.Disconnect.Canonicalize()
	}
}

// dropDeprecatedDisconnect removes stop_after_client_disconnect from the groups of job that have the same
// policy in their disconnect block when err, a refused registration, names it: setDisconnect sets both
// (see there), and a server that validates them as exclusive says so by name. It reports whether it
// removed any.
func dropDeprecatedDisconnect(job *api.Job, err error) bool {
	var ue api.UnexpectedResponseError
	if !errors.As(err, &ue) || ue.StatusCode() == 404 || ue.StatusCode() == 429 || !strings.Contains(err.Error(), "stop_after_client_disconnect") {
		return false
	}
	dropped := false
	for _, tg := range job.TaskGroups {
		if tg.StopAfterClientDisconnect != nil && tg.Disconnect != nil && tg.Disconnect.StopOnClientAfter != nil {
			tg.StopAfterClientDisconnect = nil
			dropped = true
		}
	}
	return dropped
}

// variables is the template's variables file for spec: JSON, whose strings Nomad's HCL parser takes
// verbatim (no ${…} interpolation in a variables file), so any issuer or user string arrives unchanged.
func (d *Driver) variables(spec scheduler.Spec, warm bool) (string, error) {
	v := map[string]any{
		"sandbox_id":  spec.ID,
		"issuer":      spec.Issuer,
		"user":        spec.User,
		"epoch":       spec.Epoch,
		"region":      spec.Region,
		"datacenters": d.cfg.Datacenters,
		"driver":      d.cfg.Driver,
		"runner_args": runnerArgs(d.cfg.RunnerArgs, spec),
		"env":         map[string]string{},
	}
	if warm {
		v["warm"] = true
	}
	if len(d.cfg.Env) > 0 {
		v["env"] = d.cfg.Env
	}
	if d.cfg.Binary != "" {
		v["warren_binary"] = d.cfg.Binary
	}
	if d.cfg.CPU > 0 {
		v["cpu"] = d.cfg.CPU
	}
	if d.cfg.MemoryMB > 0 {
		v["memory"] = d.cfg.MemoryMB
	}
	if d.cfg.KillTimeout > 0 {
		v["kill_timeout"] = d.cfg.KillTimeout.String()
	}
	if d.cfg.WebhookSecretPath != "" {
		v["webhook_secret_path"] = d.cfg.WebhookSecretPath
		if d.cfg.VaultRole != "" {
			v["vault_role"] = d.cfg.VaultRole
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("sandbox job variables: %w", err)
	}
	return string(b), nil
}

// runnerArgs are the operator's runner flags, then the spec's -template (last, so it wins over a default
// among them).
func runnerArgs(base []string, spec scheduler.Spec) []string {
	args := append([]string{}, base...)
	if spec.Template != "" {
		args = append(args, "-template", spec.Template)
	}
	return args
}

var sandboxIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// CheckSpec reports whether spec can become a sandbox job. Issuer, user and region may hold any valid UTF-8
// without NUL bytes (the template escapes what the Nomad client would interpolate); anything else is
// ErrInvalidSpec.
func CheckSpec(spec scheduler.Spec) error {
	if !sandboxIDPattern.MatchString(spec.ID) {
		return fmt.Errorf("%w: sandbox id %q is not 32 hex digits", ErrInvalidSpec, spec.ID)
	}
	if spec.Epoch < 1 {
		return fmt.Errorf("%w: epoch %d", ErrInvalidSpec, spec.Epoch)
	}
	if spec.Issuer == "" || spec.User == "" {
		return fmt.Errorf("%w: empty issuer or user", ErrInvalidSpec)
	}
	if spec.Template != "" && !token.ValidTemplate(spec.Template) {
		return fmt.Errorf("%w: template %q is not a template name", ErrInvalidSpec, spec.Template)
	}
	for _, f := range []struct{ name, v string }{{"issuer", spec.Issuer}, {"user", spec.User}, {"region", spec.Region}} {
		switch {
		case !utf8.ValidString(f.v):
			return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidSpec, f.name)
		case strings.ContainsRune(f.v, 0):
			return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalidSpec, f.name)
		}
	}
	return nil
}

// register submits job and returns its evaluation. Registering an unchanged job again creates no new job
// version (Nomad compares the spec), so a retried start is idempotent.
func (d *Driver) register(ctx context.Context, job *api.Job) (evalID string, err error) {
	resp, _, err := d.client.Jobs().Register(job, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil && ctx.Err() == nil && dropDeprecatedDisconnect(job, err) {
		// A server that refuses the deprecated field beside the disconnect block gets the block alone.
		resp, _, err = d.client.Jobs().Register(job, (&api.WriteOptions{}).WithContext(ctx))
	}
	if err != nil {
		return "", fmt.Errorf("register job %s: %w", *job.ID, classify(err))
	}
	if resp.EvalID == "" {
		return "", fmt.Errorf("register job %s: no evaluation created", *job.ID)
	}
	return resp.EvalID, nil
}

// awaitAllocation waits until evaluation evalID of job jobID is done and returns the job's allocation that
// is meant to run (the newest, if there were earlier ones).
func (d *Driver) awaitAllocation(ctx context.Context, jobID, evalID string) (string, error) {
	var index uint64
	retry := backoff.New(nomadRetryMin, nomadRetryMax)
	for {
		ev, meta, err := d.client.Evaluations().Info(evalID, query(ctx, index, 30*time.Second))
		if err != nil {
			err = classify(err)
			if ctx.Err() != nil || !errors.Is(err, ErrUnavailable) {
				return "", fmt.Errorf("evaluation %s of job %s: %w", evalID, jobID, err)
			}
			if !retry.Wait(ctx) {
				return "", fmt.Errorf("evaluation %s of job %s: %w (last: %w)", evalID, jobID, ctx.Err(), err)
			}
			continue
		}
		retry.Reset()
		switch ev.Status {
		case "complete":
			if len(ev.FailedTGAllocs) > 0 {
				return "", fmt.Errorf("place job %s: %w: %s", jobID, ErrNoCapacity, describePlacementFailures(ev.FailedTGAllocs))
			}
			return d.currentAllocation(ctx, jobID)
		case "failed", "canceled":
			return "", fmt.Errorf("evaluation %s of job %s %s: %s", evalID, jobID, ev.Status, ev.StatusDescription)
		}
		index = nextIndex(index, meta)
	}
}

// currentAllocation returns the newest allocation of jobID that is meant to run; when there is none, the
// newest one's failure.
func (d *Driver) currentAllocation(ctx context.Context, jobID string) (string, error) {
	stubs, _, err := d.client.Jobs().Allocations(jobID, true, query(ctx, 0, 0))
	if err != nil {
		return "", fmt.Errorf("allocations of job %s: %w", jobID, classify(err))
	}
	if len(stubs) == 0 {
		return "", fmt.Errorf("job %s: no allocation placed", jobID)
	}
	sort.Slice(stubs, func(i, j int) bool { return stubs[i].CreateIndex > stubs[j].CreateIndex })
	for _, s := range stubs {
		if s.DesiredStatus == api.AllocDesiredStatusRun && !slices.Contains(terminalClientStatuses, s.ClientStatus) {
			return s.ID, nil
		}
	}
	last := stubs[0]
	return "", fmt.Errorf("job %s: %w: allocation %s is %s/%s%s", jobID, ErrAllocationFailed, last.ID,
		last.DesiredStatus, last.ClientStatus, describeTaskStates(last.TaskStates))
}

// awaitReady waits until the runner of w's allocation has registered itself for spec's epoch, and fails as
// soon as the allocation is terminal or a newer epoch owns the user.
func (d *Driver) awaitReady(ctx context.Context, spec scheduler.Spec, w *allocWatch) (registry.Entry, error) {
	tick := time.NewTicker(d.poll)
	defer tick.Stop()
	var lastErr error
	for {
		e, err := d.cfg.Registry.Lookup(ctx, spec.Issuer, spec.User)
		switch {
		case err == nil && e.Epoch == spec.Epoch && e.Alloc == w.id:
			return e, nil
		case err == nil && e.Epoch > spec.Epoch:
			return registry.Entry{}, fmt.Errorf("runner of allocation %s: %w: epoch %d is registered", w.id, scheduler.ErrStaleEpoch, e.Epoch)
		case err != nil && !errors.Is(err, registry.ErrNotFound) && ctx.Err() == nil:
			lastErr = err // the registry's trouble; keep trying until ctx ends
		}
		select {
		case <-w.done:
			return registry.Entry{}, fmt.Errorf("runner of allocation %s: %w: %s", w.id, ErrAllocationFailed, w.describe())
		case <-ctx.Done():
			if lastErr != nil {
				return registry.Entry{}, fmt.Errorf("runner of allocation %s not registered (%s; registry: %v): %w", w.id, w.describe(), lastErr, ctx.Err())
			}
			return registry.Entry{}, fmt.Errorf("runner of allocation %s not registered (%s): %w", w.id, w.describe(), ctx.Err())
		case <-tick.C:
		}
	}
}

// abandon ends jobID after a failed start, even when ctx has ended: deregistered, given up to 10 s to stop,
// then purged (see end).
func (d *Driver) abandon(ctx context.Context, jobID string, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.end(cctx, jobID, nil); err != nil {
		log.Warn("end abandoned sandbox job", "err", err)
	}
}

// purge deregisters jobID and removes it from Nomad's state. Nomad 1.6.6/1.7.3 and later delete the job's
// allocations with it at once (hashicorp/nomad#19609), so a job whose allocation may still run is ended
// with end, which purges once the allocation is terminal. A job that is gone is nil. Only sandbox jobs ("sandbox-…") are touched: job
// ids may come from announcements and allocations other processes wrote.
func (d *Driver) purge(ctx context.Context, jobID string) error {
	if !strings.HasPrefix(jobID, jobPrefix) {
		return fmt.Errorf("deregister job %q: not a sandbox job", jobID)
	}
	_, _, err := d.client.Jobs().Deregister(jobID, true, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("deregister job %s: %w", jobID, classify(err))
	}
	return nil
}

var terminalClientStatuses = []string{api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost}

// terminal reports whether a will not run (again): its client status is terminal, or every task is dead.
func terminal(a *api.Allocation) bool {
	if a.ClientTerminalStatus() {
		return true
	}
	return tasksDead(a.TaskStates)
}

// tasksDead reports whether there are task states and every task is dead.
func tasksDead(states map[string]*api.TaskState) bool {
	if len(states) == 0 {
		return false
	}
	for _, ts := range states {
		if ts.State != "dead" {
			return false
		}
	}
	return true
}

// allocWatch follows one allocation until it is terminal; done is the sandbox's Exited.
type allocWatch struct {
	id, jobID string
	done      chan struct{}
	closeOnce sync.Once
	stopping  atomic.Bool // the driver is ending the job itself: no deregistration on termination

	mu   sync.Mutex
	last *api.Allocation // nil until seen
	gone bool            // Nomad no longer knows the allocation
}

// watch follows allocation id of jobID until it is terminal or the driver is closed; a second call for an
// allocation already followed shares the first one's watch.
func (d *Driver) watch(id, jobID string) (*allocWatch, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("driver closed")
	}
	if w := d.watches[id]; w != nil {
		return w, nil
	}
	w := &allocWatch{id: id, jobID: jobID, done: make(chan struct{})}
	d.watches[id] = w
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.follow(w)
		d.mu.Lock()
		delete(d.watches, id)
		d.mu.Unlock()
	}()
	return w, nil
}

// watchWait is the wait time of the allocation watch's blocking queries. Nomad answers one at once when the
// allocation changes, but not when it is deleted (a purge on Nomad 1.6.6/1.7.3 and later): then the query
// returns when its wait is up, and the next one gets the 404. Stop does not depend on it (end finishes the
// watch itself); an allocation purged by someone else is seen gone within this long.
const watchWait = 30 * time.Second

func (d *Driver) follow(w *allocWatch) {
	var index uint64
	retry := backoff.New(nomadRetryMin, nomadRetryMax)
	for {
		a, meta, err := d.client.Allocations().Info(w.id, query(d.bg, index, watchWait))
		if d.bg.Err() != nil {
			return
		}
		if isNotFound(err) {
			w.mu.Lock()
			w.gone = true
			w.mu.Unlock()
			w.finish()
			return
		}
		if err != nil {
			d.log.Debug("watch allocation", "alloc", w.id, "err", err)
			if !retry.Wait(d.bg) {
				return
			}
			continue
		}
		retry.Reset()
		w.mu.Lock()
		w.last = a
		w.mu.Unlock()
		if terminal(a) {
			w.finish()
			if !w.stopping.Load() {
				// Ended without Stop (slept, failed, lost): no replacement under this epoch.
				d.log.Info("sandbox allocation ended", "alloc", w.id, "job", w.jobID, "status", a.ClientStatus, "events", describeTaskStates(a.TaskStates))
				ctx, cancel := context.WithTimeout(d.bg, 15*time.Second)
				if err := d.purge(ctx, w.jobID); err != nil {
					d.log.Warn("deregister ended sandbox job", "job", w.jobID, "err", err)
				}
				cancel()
			}
			return
		}
		index = nextIndex(index, meta)
	}
}

// finish closes the sandbox's Exited (once): the watch saw the allocation end or vanish, or Stop saw it.
func (w *allocWatch) finish() { w.closeOnce.Do(func() { close(w.done) }) }

// describe is what is known of the allocation's state, for error messages.
func (w *allocWatch) describe() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.gone:
		return "allocation is gone"
	case w.last == nil:
		return "allocation not seen yet"
	}
	return fmt.Sprintf("allocation %s/%s%s", w.last.DesiredStatus, w.last.ClientStatus, describeTaskStates(w.last.TaskStates))
}

// describeTaskStates lists each task's state and its last few events.
func describeTaskStates(states map[string]*api.TaskState) string {
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		ts := states[n]
		fmt.Fprintf(&b, "; task %s %s", n, ts.State)
		if ts.Failed {
			b.WriteString(" (failed)")
		}
		events := ts.Events
		if len(events) > 4 {
			events = events[len(events)-4:]
		}
		for _, e := range events {
			msg := e.DisplayMessage
			if msg == "" {
				msg = e.Message
			}
			fmt.Fprintf(&b, " [%s: %s]", e.Type, msg)
		}
	}
	return b.String()
}

// describePlacementFailures summarizes why task groups could not be placed.
func describePlacementFailures(failed map[string]*api.AllocationMetric) string {
	var parts []string
	for tg, m := range failed {
		if m == nil {
			continue
		}
		s := fmt.Sprintf("group %s: %d nodes evaluated, %d filtered", tg, m.NodesEvaluated, m.NodesFiltered)
		for k, n := range m.ConstraintFiltered {
			s += fmt.Sprintf(", %d filtered by %s", n, k)
		}
		for k, n := range m.DimensionExhausted {
			s += fmt.Sprintf(", %d exhausted %s", n, k)
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// query is a (blocking, when index > 0) query bound to ctx.
func query(ctx context.Context, index uint64, wait time.Duration) *api.QueryOptions {
	return (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx)
}

// nextIndex is the wait index of the next blocking query (reset when Nomad's index went backwards, e.g.
// after a restore).
func nextIndex(prev uint64, meta *api.QueryMeta) uint64 {
	if meta == nil || meta.LastIndex < prev {
		return 0
	}
	return meta.LastIndex
}

func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == 404
}

// classify wraps the errors that mean "Nomad is not there now" (network errors, 5xx, 429) with
// ErrUnavailable; context errors and other answers stay as they are.
func classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		if ue.StatusCode() >= 500 || ue.StatusCode() == 429 {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// reason is the metric label of a failed start.
func reason(err error) string {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return reasonCancelled
	case errors.Is(err, ErrUnavailable):
		return reasonUnavailable
	case errors.Is(err, ErrNoCapacity):
		return reasonNoCapacity
	case errors.Is(err, ErrAllocationFailed):
		return reasonAllocFailed
	case errors.Is(err, scheduler.ErrStaleEpoch):
		return reasonSuperseded
	case errors.Is(err, ErrInvalidSpec):
		return reasonInvalid
	}
	return reasonOther
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Retries against an unavailable Nomad wait 250 ms doubling to 5 s (internal/backoff, jittered).
const (
	nomadRetryMin = 250 * time.Millisecond
	nomadRetryMax = 5 * time.Second
)
