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
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
)

// The warm pool (issue 4): Size runner allocations started ahead of demand, each `warren runner -warm` from
// the sandbox template with placeholder identity, announced in Consul. Start claims one (a check-and-set
// in Consul, so concurrent schedulers never share one), tells it which sandbox it is now (POST
// /v1/assign with the key it announced), and waits for it to register under the user's lock — no job
// registration, no placement, no process start on the path. The pool refills in the background. A claimed
// allocation is an ordinary sandbox from then on: Stop purges its job, Exited follows its allocation.

// WarmRegistry is where warm runners announce themselves (the Consul registry).
type WarmRegistry interface {
	ClaimWarm(ctx context.Context, region string) (consul.Warm, error)
	CountWarm(ctx context.Context, region string) (int, error)
}

// PoolConfig enables the warm pool.
type PoolConfig struct {
	Size     int          // warm runners to keep ready
	Region   string       // the Warren region (and the announcement's namespace)
	Registry WarmRegistry // required
	// Refill is how often the pool is checked and topped up (default 1s); a claim triggers a check at once.
	Refill time.Duration
	HTTP   *http.Client // for the assignment call; default: 10 s timeout
}

type pool struct {
	d       *Driver
	cfg     PoolConfig
	kick    chan struct{}
	mu      sync.Mutex
	pending map[string]time.Time // warm jobs registered, not yet announced: job id → when
	claims  *prometheus.HistogramVec
}

// warmPending is how long a registered warm job counts towards the pool before its announcement shows.
const warmPending = 30 * time.Second

func (d *Driver) startPool(cfg PoolConfig) (*pool, error) {
	if cfg.Registry == nil {
		return nil, errors.New("nomad driver: the warm pool needs a registry")
	}
	if cfg.Refill <= 0 {
		cfg.Refill = time.Second
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	p := &pool{d: d, cfg: cfg, kick: make(chan struct{}, 1), pending: map[string]time.Time{},
		claims: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_nomad_warm_claim_seconds",
			Help:    "Time from claiming a warm runner to it serving the assigned sandbox, by outcome.",
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

// fill registers warm jobs until announced + pending reaches Size.
func (p *pool) fill(ctx context.Context) error {
	have, err := p.cfg.Registry.CountWarm(ctx, p.cfg.Region)
	if err != nil {
		return err
	}
	p.mu.Lock()
	for id, at := range p.pending {
		if time.Since(at) > warmPending {
			delete(p.pending, id)
		}
	}
	// A pending job whose runner has announced itself is counted twice until it expires from pending:
	// the pool is briefly under-filled, never over-filled.
	need := p.cfg.Size - have - len(p.pending)
	p.mu.Unlock()
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

// claim hands spec to a warm runner; ok is false when the pool is empty (the caller starts cold).
func (p *pool) claim(ctx context.Context, spec scheduler.Spec) (sb scheduler.Sandbox, ok bool, err error) {
	begin := time.Now()
	w, err := p.cfg.Registry.ClaimWarm(ctx, p.cfg.Region)
	if errors.Is(err, consul.ErrNoWarm) {
		p.claims.WithLabelValues("empty").Observe(time.Since(begin).Seconds())
		return sb, false, nil
	}
	if err != nil {
		return sb, false, err
	}
	select { // refill now
	case p.kick <- struct{}{}:
	default:
	}
	a, _, err := p.d.client.Allocations().Info(w.Alloc, query(ctx, 0, 0))
	if err != nil {
		return sb, true, fmt.Errorf("warm allocation %s: %w", w.Alloc, classify(err))
	}
	watch, err := p.d.watch(a.ID, a.JobID)
	if err != nil {
		return sb, true, err
	}
	fail := func(err error) (scheduler.Sandbox, bool, error) {
		watch.stopping.Store(true)
		p.d.abandon(ctx, a.JobID, p.d.log)
		p.claims.WithLabelValues("error").Observe(time.Since(begin).Seconds())
		return scheduler.Sandbox{}, true, err
	}
	if err := p.assign(ctx, w, spec); err != nil {
		return fail(fmt.Errorf("assign warm runner %s: %w", w.Alloc, err))
	}
	entry, err := p.d.awaitReady(ctx, spec, watch)
	if err != nil {
		return fail(err)
	}
	p.claims.WithLabelValues("ok").Observe(time.Since(begin).Seconds())
	p.d.log.Info("sandbox ready from the warm pool", "alloc", a.ID, "issuer", spec.Issuer, "user", spec.User,
		"epoch", spec.Epoch, "seconds", time.Since(begin).Seconds())
	return scheduler.Sandbox{Alloc: a.ID, Addr: entry.Addr, Key: entry.Key, Exited: watch.done}, true, nil
}

func (p *pool) assign(ctx context.Context, w consul.Warm, spec scheduler.Spec) error {
	body, _ := json.Marshal(map[string]any{"issuer": spec.Issuer, "user": spec.User, "epoch": spec.Epoch, "region": spec.Region})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+w.Addr+"/v1/assign", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+w.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusAccepted {
		return wire.ReadHTTPError(resp.StatusCode, b)
	}
	return nil
}
