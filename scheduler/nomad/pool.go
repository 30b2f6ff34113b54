package nomad

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
)

// The warm pool (issue 4): Size runner allocations started ahead of demand, each `warren runner -warm` from
// the sandbox template with placeholder identity, announced in Consul. Start claims one (a check-and-set
// in Consul, so concurrent schedulers never share one), tells it which sandbox it is now (POST
// /v1/assign with the key it announced), and waits for it to register under the user's lock — no job
// registration, no placement, no process start on the path. The pool refills in the background. A claimed
// allocation is an ordinary sandbox from then on: Stop purges its job, Exited follows its allocation.
//
// The announcement is not trusted: before assigning, the claimed allocation must belong to a warm-pool job
// of this region (a "sandbox-" job with meta warren_role = "warm" and warren_region = the pool's) listening
// on the announced address; a runner that fails those checks, or that refuses the assignment, is left
// alone (its announcement gone, a genuine warm runner exits by itself, see cmd/warren/runner_warm.go), and
// one whose address does not accept connections (it died before its session expired) is abandoned. After
// claimAttempts such runners Start falls back to a cold start.
//
// The pool is bounded by Nomad's view, not only by announcements: warm jobs of this region that Nomad has
// not placed (cluster full) count towards Size, so a full cluster does not make the pool register ever
// more jobs; warm jobs whose runners ended unclaimed (dead) are purged.

// WarmRegistry is where warm runners announce themselves (the Consul registry).
type WarmRegistry interface {
	ClaimWarm(ctx context.Context, region string) (registry.Warm, error)
	ListWarm(ctx context.Context, region string) ([]registry.Warm, error)
}

// PoolConfig enables the warm pool.
type PoolConfig struct {
	Size     int          // warm runners to keep ready
	Region   string       // the Warren region (and the announcement's namespace)
	Registry WarmRegistry // required
	// Refill is how often the pool is checked and topped up (default 1s); a claim triggers a check at once.
	Refill time.Duration
	// Pending is how long a warm job registered by this pool counts towards Size while its runner starts
	// and before its announcement shows (default 30s). Jobs Nomad has not placed count for as long as
	// they stay unplaced.
	Pending time.Duration
	HTTP    *http.Client // for the assignment call; default: 10 s timeout
}

type pool struct {
	d       *Driver
	cfg     PoolConfig
	kick    chan struct{}
	mu      sync.Mutex
	pending map[string]time.Time // warm jobs registered here, not yet seen announced: job id → when
	claims  *prometheus.HistogramVec
}

const (
	// defaultWarmPending is PoolConfig.Pending's default.
	defaultWarmPending = 30 * time.Second
	// claimAttempts bounds the warm runners one Start tries before it starts cold.
	claimAttempts = 3
	// Job meta of warm-pool jobs (jobs/sandbox.nomad.hcl).
	metaRole, metaRegion, roleWarm = "warren_role", "warren_region", "warm"
)

// errUnusable marks a claimed warm runner that was not used and that the caller may replace with the next
// one: nothing was assigned to it.
var errUnusable = errors.New("warm runner unusable")

// errRefused marks an assignment the runner answered with something else than 202 Accepted: it was not
// taken.
var errRefused = errors.New("assignment refused")

func (d *Driver) startPool(cfg PoolConfig) (*pool, error) {
	if cfg.Registry == nil {
		return nil, errors.New("nomad driver: the warm pool needs a registry")
	}
	if cfg.Refill <= 0 {
		cfg.Refill = time.Second
	}
	if cfg.Pending <= 0 {
		cfg.Pending = defaultWarmPending
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	p := &pool{d: d, cfg: cfg, kick: make(chan struct{}, 1), pending: map[string]time.Time{},
		claims: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_nomad_warm_claim_seconds",
			Help:    "Time from claiming a warm runner to it serving the assigned sandbox, by outcome (ok, error, empty: none announced, skipped: only unusable ones, then a cold start).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"outcome"})}
	if d.cfg.Metrics != nil {
		if err := d.cfg.Metrics.Register(p.claims); err != nil {
			return nil, fmt.Errorf("nomad driver: register metrics: %w", err)
		}
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		p.loop(d.bg)
	}()
	return p, nil
}

func (p *pool) loop(ctx context.Context) {
	t := time.NewTicker(p.cfg.Refill)
	defer t.Stop()
	for {
		if err := p.fill(ctx); err != nil && ctx.Err() == nil {
			p.d.log.Warn("warm pool refill", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

// fill registers warm jobs until announced + not yet announced reaches Size. Not yet announced are the
// region's warm jobs Nomad has not placed, and the jobs this pool registered within Pending that are still
// there; a job both announced and pending here is counted twice until Pending passes, so the pool may be
// briefly under-filled, never over-filled. Dead warm jobs (runners that ended unclaimed) are purged.
func (p *pool) fill(ctx context.Context) error {
	warm, err := p.cfg.Registry.ListWarm(ctx, p.cfg.Region)
	if err != nil {
		return err
	}
	have := len(warm)
	announced := make(map[string]bool, len(warm))
	for _, w := range warm {
		announced[w.Job] = true
	}
	jobs, err := p.warmJobs(ctx)
	if err != nil {
		return err
	}
	status := make(map[string]string, len(jobs))
	unannounced := map[string]bool{}
	var dead []string
	for _, j := range jobs {
		status[j.ID] = j.Status
		switch j.Status {
		case "pending": // not placed
			unannounced[j.ID] = true
		case "dead":
			dead = append(dead, j.ID)
		}
	}
	now := time.Now()
	p.mu.Lock()
	for id, at := range p.pending {
		st, listed := status[id]
		if !listed || st == "dead" || announced[id] || now.Sub(at) > p.cfg.Pending {
			delete(p.pending, id)
			continue
		}
		unannounced[id] = true
	}
	need := p.cfg.Size - have - len(unannounced)
	p.mu.Unlock()
	for _, id := range dead {
		if err := p.d.purge(ctx, id); err != nil {
			p.d.log.Warn("purge ended warm runner job", "job", id, "err", err)
		}
	}
	for range max(need, 0) {
		jobID, err := p.startWarm(ctx)
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.pending[jobID] = time.Now()
		p.mu.Unlock()
	}
	return nil
}

// warmJobs lists this region's warm-pool jobs, as Nomad knows them.
func (p *pool) warmJobs(ctx context.Context) ([]*api.JobListStub, error) {
	q := query(ctx, 0, 0)
	q.Prefix = jobPrefix
	stubs, _, err := p.d.client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q)
	if err != nil {
		return nil, fmt.Errorf("list warm jobs: %w", classify(err))
	}
	out := stubs[:0]
	for _, j := range stubs {
		if strings.HasPrefix(j.ID, jobPrefix) && j.Meta[metaRole] == roleWarm && j.Meta[metaRegion] == p.cfg.Region {
			out = append(out, j)
		}
	}
	return out, nil
}

// startWarm registers one warm job: the sandbox template with a random placeholder sandbox id and -warm.
func (p *pool) startWarm(ctx context.Context) (string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	spec := scheduler.Spec{ID: hex.EncodeToString(b[:]), Issuer: "warm", User: "warm", Epoch: 1, Region: p.cfg.Region}
	job, err := p.d.job(ctx, spec, true)
	if err != nil {
		return "", err
	}
	if _, err := p.d.register(ctx, job); err != nil {
		return "", err
	}
	p.d.log.Debug("warm runner job registered", "job", *job.ID)
	return *job.ID, nil
}

// claim hands spec to a warm runner; ok is false when the pool has none that can take it (the caller starts
// cold). Unusable runners (see use) are skipped, up to claimAttempts of them.
func (p *pool) claim(ctx context.Context, spec scheduler.Spec) (sb scheduler.Sandbox, ok bool, err error) {
	begin := time.Now()
	for attempt := 1; attempt <= claimAttempts; attempt++ {
		w, err := p.cfg.Registry.ClaimWarm(ctx, p.cfg.Region)
		if errors.Is(err, registry.ErrNoWarm) {
			p.observe("empty", begin)
			return sb, false, nil
		}
		if err != nil {
			return sb, false, err
		}
		select { // refill now
		case p.kick <- struct{}{}:
		default:
		}
		sb, err = p.use(ctx, spec, w, begin)
		if !errors.Is(err, errUnusable) {
			return sb, true, err
		}
		p.d.log.Warn("skipped a claimed warm runner", "alloc", w.Alloc, "attempt", attempt, "err", err)
		if ctx.Err() != nil {
			p.observe("error", begin)
			return sb, true, fmt.Errorf("claim a warm runner: %w", ctx.Err())
		}
	}
	p.observe("skipped", begin)
	return sb, false, nil
}

func (p *pool) observe(outcome string, begin time.Time) {
	p.claims.WithLabelValues(outcome).Observe(time.Since(begin).Seconds())
}

// use assigns spec to the claimed warm runner w and waits for it to serve. An error wrapping errUnusable
// means nothing was assigned and the next runner may be tried: w's allocation is unknown, fails the checks
// of verify, or its runner answered the assignment with a refusal (all left alone), or nothing listens
// at its address (its job is abandoned). Any other error is final, and the job is abandoned when it is
// known: the runner may have taken the assignment.
func (p *pool) use(ctx context.Context, spec scheduler.Spec, w registry.Warm, begin time.Time) (scheduler.Sandbox, error) {
	a, _, err := p.d.client.Allocations().Info(w.Alloc, query(ctx, 0, 0))
	if isNotFound(err) {
		return scheduler.Sandbox{}, fmt.Errorf("%w: allocation %s is unknown to Nomad", errUnusable, w.Alloc)
	}
	if err != nil {
		// Its job is unknown, so there is nothing to abandon; the runner, its announcement gone and no
		// assignment coming, exits by itself.
		p.observe("error", begin)
		return scheduler.Sandbox{}, fmt.Errorf("warm allocation %s: %w", w.Alloc, classify(err))
	}
	if err := p.verify(ctx, a, w); err != nil {
		return scheduler.Sandbox{}, fmt.Errorf("%w: %w", errUnusable, err)
	}
	log := p.d.log.With("alloc", a.ID, "job", a.JobID)
	p.mu.Lock()
	delete(p.pending, a.JobID)
	p.mu.Unlock()
	fail := func(err error) (scheduler.Sandbox, error) {
		p.d.abandon(ctx, a.JobID, log)
		p.observe("error", begin)
		return scheduler.Sandbox{}, err
	}
	if err := p.assign(ctx, w, spec); err != nil {
		switch {
		case ctx.Err() == nil && errors.Is(err, errRefused):
			// It answered, so it is alive and did not take spec; it may not even be a waiting warm runner
			// (an announcement naming a serving sandbox), so its job is left alone.
			return scheduler.Sandbox{}, fmt.Errorf("%w: assign warm runner %s: %w", errUnusable, a.ID, err)
		case ctx.Err() == nil && notDelivered(err):
			p.d.abandon(ctx, a.JobID, log)
			return scheduler.Sandbox{}, fmt.Errorf("%w: assign warm runner %s: %w", errUnusable, a.ID, err)
		}
		return fail(fmt.Errorf("assign warm runner %s: %w", a.ID, err))
	}
	watch, err := p.d.watch(a.ID, a.JobID)
	if err != nil {
		return fail(err)
	}
	entry, err := p.d.awaitReady(ctx, spec, watch)
	if err != nil {
		watch.stopping.Store(true)
		return fail(err)
	}
	p.observe("ok", begin)
	p.d.log.Info("sandbox ready from the warm pool", "alloc", a.ID, "issuer", spec.Issuer, "user", spec.User,
		"epoch", spec.Epoch, "seconds", time.Since(begin).Seconds())
	return scheduler.Sandbox{Alloc: a.ID, Addr: entry.Addr, Key: entry.Key, Exited: watch.done}, nil
}

// verify checks that a, the allocation an announcement named, is a warm runner of this pool: its job is a
// sandbox job with warm-pool meta of this region, w.Addr is one of its allocated addresses, and this driver
// is not following it already (it would be a sandbox claimed here before).
func (p *pool) verify(ctx context.Context, a *api.Allocation, w registry.Warm) error {
	if !strings.HasPrefix(a.JobID, jobPrefix) {
		return fmt.Errorf("allocation %s belongs to job %q, not a sandbox", a.ID, a.JobID)
	}
	job := a.Job
	if job == nil {
		j, _, err := p.d.client.Jobs().Info(a.JobID, query(ctx, 0, 0))
		if err != nil {
			return fmt.Errorf("job %s of allocation %s: %w", a.JobID, a.ID, classify(err))
		}
		job = j
	}
	if deref(job.ID) != a.JobID || job.Meta[metaRole] != roleWarm || job.Meta[metaRegion] != p.cfg.Region {
		return fmt.Errorf("allocation %s: job %s has role %q in region %q, not a warm runner of region %q",
			a.ID, a.JobID, job.Meta[metaRole], job.Meta[metaRegion], p.cfg.Region)
	}
	if !slices.Contains(allocAddrs(a), w.Addr) {
		return fmt.Errorf("allocation %s does not listen on the announced address %s", a.ID, w.Addr)
	}
	p.d.mu.Lock()
	_, followed := p.d.watches[a.ID]
	p.d.mu.Unlock()
	if followed {
		return fmt.Errorf("allocation %s is a sandbox this driver started already", a.ID)
	}
	return nil
}

// allocAddrs are the host:port addresses Nomad allocated to a.
func allocAddrs(a *api.Allocation) []string {
	var out []string
	add := func(ip string, port int) {
		if ip != "" && port > 0 {
			out = append(out, net.JoinHostPort(ip, strconv.Itoa(port)))
		}
	}
	nets := func(ns []*api.NetworkResource) {
		for _, n := range ns {
			if n == nil {
				continue
			}
			for _, ps := range [][]api.Port{n.ReservedPorts, n.DynamicPorts} {
				for _, port := range ps {
					add(n.IP, port.Value)
				}
			}
		}
	}
	if r := a.AllocatedResources; r != nil {
		for _, pm := range r.Shared.Ports {
			add(pm.HostIP, pm.Value)
		}
		nets(r.Shared.Networks)
	}
	return out
}

// assign tells w which sandbox it now is. An error wrapping errRefused means the runner answered without
// accepting; notDelivered tells the errors where the request never reached it.
func (p *pool) assign(ctx context.Context, w registry.Warm, spec scheduler.Spec) error {
	a := map[string]any{"issuer": spec.Issuer, "user": spec.User, "epoch": spec.Epoch, "region": spec.Region}
	if spec.Template != "" {
		a["template"] = spec.Template
	}
	body, _ := json.Marshal(a)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+w.Addr+"/v1/assign", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+w.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%w: status %d: %w", errRefused, resp.StatusCode, wire.ReadHTTPError(resp.StatusCode, b))
	}
	return nil
}

// notDelivered reports whether err means the request never reached a server: the connection could not be
// made (refused, unreachable, dial timeout). An error after connecting may come after the runner took the
// assignment.
func notDelivered(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
