package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/agent/claude"
	"github.com/warren-mesh/warren/runner/modelproxy"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// agentParts are the pieces New builds when cfg.Model is set.
type agentParts struct {
	proxy    *modelproxy.Proxy
	driver   *claude.Driver
	meter    *meteredAgent
	proxyURL string
}

// buildAgent wires the model proxy, the metering wrapper and the Claude Code driver, when the runner has
// a model and no agent of the caller's.
func (r *Runner) buildAgent() error {
	if r.cfg.Model == nil || r.cfg.Agent != nil {
		return nil
	}
	mc := r.cfg.Model
	if mc.Home == "" {
		return fmt.Errorf("%w: model home dir is required", ErrConfig)
	}
	prices := mc.Prices
	if prices.Models == nil && prices.Default == (billing.Price{}) {
		prices = billing.DefaultPrices()
	}
	proxy, err := modelproxy.New(modelproxy.Config{
		Upstream: mc.Upstream, APIKey: mc.APIKey, Reserver: mc.Reserver, Prices: prices, Grace: mc.Grace,
		Logger: r.log.With("component", "modelproxy"), Now: r.cfg.Now, Metrics: r.metrics.reg,
		RequireTurn: true, AllowFields: mc.AllowFields, AllowBetas: mc.AllowBetas,
	})
	if err != nil {
		return fmt.Errorf("model proxy: %w", err)
	}
	parts := &agentParts{proxy: proxy}
	m := &meteredAgent{
		proxy: proxy, proxyURL: func() string { return parts.proxyURL }, grant: r.Grant, models: r.allowedModels,
		now: r.cfg.Now, log: r.log, turns: map[string]turnMark{}, grants: map[string]wire.Grant{},
	}
	if r.snap != nil {
		// After the turn, not inside it: the turn (and the session's state) ends when its result is out;
		// the snapshot follows in the background, serialized with the others and awaited on shutdown.
		m.afterTurn = func(ctx context.Context) {
			r.bg.Add(1)
			go func() {
				defer r.bg.Done()
				r.snapshot(ctx, "turn")
			}()
		}
	}
	driver, err := claude.New(claude.Config{
		CLIPath: mc.CLIPath, Workspace: r.cfg.Workspace, Home: mc.Home, Bwrap: r.cfg.BwrapPath,
		Insecure: r.cfg.Insecure, Sandbox: r.sandbox, Endpoint: m.Endpoint, Release: m.Release, Watch: r.disk.watch, Env: mc.Env, Decorate: m.Decorate,
		DefaultModel: mc.DefaultModel, Logger: r.log.With("component", "claude"), AllowBeta: proxy.AllowsBeta,
		AgentIdle: r.cfg.AgentIdle,
		// The connection's own grant (a turn's or an init's) decides; without one, the session's.
		Policy: func(sessionID string, meta any) (claude.Permissions, json.RawMessage) {
			g, ok := meta.(wire.Grant)
			if !ok {
				g = m.grantOf(sessionID)
			}
			return r.policy(g)
		},
	})
	if err != nil {
		return fmt.Errorf("agent driver: %w", err)
	}
	m.inner = driver
	parts.driver, parts.meter = driver, m
	r.agent = parts
	r.cfg.Agent = m
	return nil
}

// buildSnapshots sets up persistence of the workspace and the agent's home, when the runner has a store.
func (r *Runner) buildSnapshots() error {
	if r.cfg.Snapshots == nil {
		return nil
	}
	dirs := map[string]string{"workspace": r.cfg.Workspace}
	if r.cfg.Model != nil {
		dirs["home"] = r.cfg.Model.Home
	}
	s, err := snapshot.New(snapshot.Config{
		Store: r.cfg.Snapshots, Prefix: r.cfg.SnapshotPrefix, Dirs: dirs,
		Region: r.cfg.snapshotRegion(), Regions: r.cfg.SnapshotRegions,
		Logger: r.log.With("component", "snapshot"), Now: r.cfg.Now,
		StoredBytesLimit: r.storedBytesLimit,
	})
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	r.snap = s
	// One runner per user, so the gauge is the user's without a label (no cardinality from users).
	if err := r.metrics.reg.Register(&storedBytesCollector{snap: s, desc: newStoredBytesDesc()}); err != nil {
		return fmt.Errorf("snapshots: metrics: %w", err)
	}
	return nil
}

// storedBytesLimit is the grant's cap on the bytes the snapshots keep (Grant.Limits.StoredBytes; 0 not
// set and -1 unlimited are both no cap).
func (r *Runner) storedBytesLimit() int64 {
	if l := r.Grant().Limits; l != nil {
		return l.StoredBytes
	}
	return 0
}

func newStoredBytesDesc() *prometheus.Desc {
	return prometheus.NewDesc("warren_snapshot_stored_bytes",
		"Bytes this sandbox's snapshots keep in the blob store (retained snapshots and not yet collected garbage), "+
			"as last measured by garbage collection plus what was written since; absent until first measured.",
		nil, nil)
}

// storedBytesCollector reports snapshot.Snapshotter.StoredBytes once it is known.
type storedBytesCollector struct {
	snap *snapshot.Snapshotter
	desc *prometheus.Desc
}

func (c *storedBytesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *storedBytesCollector) Collect(ch chan<- prometheus.Metric) {
	if v := c.snap.StoredBytes(); v >= 0 {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v))
	}
}

// restore brings back the latest snapshot before the runner serves anything.
func (r *Runner) restore(ctx context.Context) error {
	if r.snap == nil {
		return nil
	}
	start := time.Now()
	// First the fence: from now on no runner of an older epoch commits a snapshot or reclaims in this
	// region's store (docs/ARCHITECTURE.md#snapshots).
	if err := r.snap.Fence(ctx, r.cfg.Epoch); err != nil {
		return fmt.Errorf("fence snapshots at epoch %d: %w", r.cfg.Epoch, err)
	}
	m, ok, err := r.snap.LatestFor(ctx, r.cfg.Epoch)
	if err != nil {
		return fmt.Errorf("read latest snapshot: %w", err)
	}
	if !ok {
		r.log.Info("no snapshot to restore")
		return r.restoreTemplate(ctx)
	}
	if m.Epoch > r.cfg.Epoch {
		return fmt.Errorf("latest snapshot has epoch %d above ours (%d): %w", m.Epoch, r.cfg.Epoch, snapshot.ErrFenced)
	}
	st, err := r.snap.Restore(ctx, m)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	r.log.Info("snapshot restored", "from_epoch", m.Epoch, "files", st.Files, "bytes", st.Bytes, "ms", time.Since(start).Milliseconds())
	return nil
}

// snapshot writes a snapshot; a fenced write means a newer runner owns the sandbox, so this one stops
// (and fenced is true).
func (r *Runner) snapshot(ctx context.Context, why string) (fenced bool) {
	if r.snap == nil {
		return false
	}
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	m, st, err := r.snap.Snapshot(ctx, r.cfg.Epoch)
	switch {
	case errors.Is(err, snapshot.ErrFenced):
		r.log.Error("snapshot fenced: a newer runner owns this sandbox; stopping", "why", why)
		r.stop(ErrFencedOff)
		return true
	case errors.Is(err, snapshot.ErrStoredBytesQuota):
		// The previous snapshot stays latest; what changed since is not persisted until usage goes down.
		r.log.Warn("snapshot refused: stored-bytes limit", "why", why, "code", wire.CodeOf(err),
			"limit_bytes", r.storedBytesLimit(), "stored_bytes", r.snap.StoredBytes(), "err", err)
		return false
	case err != nil:
		r.log.Error("snapshot failed", "why", why, "err", err)
		return false
	default:
		r.log.Info("snapshot written", "why", why, "snapshot", fmt.Sprintf("%d-%d", m.Epoch, m.Seq), "files", st.Files,
			"uploaded_files", st.FilesUploaded, "uploaded_bytes", st.BytesUploaded, "ms", st.Duration.Milliseconds())
	}
	// Garbage collection after a commit, at most every snapshot.DefaultGCEvery, bounded and cancelled
	// with ctx (the Snapshotter logs its outcome with the prefix).
	gctx, gcancel := context.WithTimeout(ctx, gcTimeout)
	defer gcancel()
	if _, ran, err := r.snap.CollectIfDue(gctx); ran && err != nil {
		r.log.Warn("snapshot gc failed", "why", why, "err", err)
	}
	return false
}

// gcTimeout bounds one garbage collection after a snapshot.
const gcTimeout = 2 * time.Minute

// Grant is the newest grant an admitted caller brought (zero before any).
func (r *Runner) Grant() wire.Grant {
	if g := r.grant.Load(); g != nil {
		return *g
	}
	return wire.Grant{Issuer: r.cfg.Issuer, User: r.cfg.User, Window: "lifetime", AIMicros: 0, ComputeSeconds: 0}
}

// idleLoop stops the runner once nothing has happened for IdleTimeout: snapshot, then exit (sleep).
func (r *Runner) idleLoop(ctx context.Context, busy func() bool) {
	if r.cfg.IdleTimeout <= 0 {
		return
	}
	tick := min(r.cfg.IdleTimeout/4, time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	last := r.cfg.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := r.cfg.Now()
		if busy() {
			last = now
			continue
		}
		if la := time.Unix(0, r.lastActive.Load()); la.After(last) {
			last = la
		}
		if now.Sub(last) >= r.cfg.IdleTimeout {
			r.log.Info("idle: sleeping", "idle_for", now.Sub(last).String())
			r.stop(ErrIdle)
			return
		}
	}
}

// afterShutdown stops the agent's processes and the proxy, then writes the last snapshot (the sandbox may
// resume elsewhere from it) unless a newer epoch fenced this runner off.
func (r *Runner) afterShutdown(cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	if r.agent != nil {
		if err := r.agent.driver.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop agent: %w", err))
		}
		if err := r.agent.proxy.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop model proxy: %w", err))
		}
	}
	r.bg.Wait() // snapshots of finished turns
	// A lapsed lease still snapshots: until a newer epoch commits, this is the newest state, and once one
	// has, the fence refuses this commit.
	if !errors.Is(cause, ErrFencedOff) || errors.Is(cause, ErrLeaseLapsed) {
		why := "shutdown"
		if errors.Is(cause, ErrIdle) {
			why = "sleep"
		}
		// The process table is kept for the next wake (runner/procs), unless the snapshot was fenced.
		if !r.snapshot(ctx, why) {
			r.procs.Save(ctx)
		}
	}
	return errors.Join(errs...)
}

// allowedModels are the models a grant's permissions allow the agent to call (nil: any): permissions.model,
// an alias resolved (policy).
func (r *Runner) allowedModels(g wire.Grant) []string {
	if p, _ := r.policy(g); p.Model != "" {
		return []string{p.Model}
	}
	return nil
}

// policy is a grant's permissions and sdkConfig (docs/PROTOCOL.md#tokens), which override the client's
// session options.
func (r *Runner) policy(g wire.Grant) (claude.Permissions, json.RawMessage) {
	var p struct {
		Tools        []string `json:"tools"`
		BlockedTools []string `json:"blockedTools"`
		MaxTurns     int      `json:"maxTurns"`
		Model        string   `json:"model"`
	}
	if len(g.Permissions) > 0 {
		if err := strictjson.Unmarshal(g.Permissions, &p); err != nil {
			// The edge verified the token; a grant it encoded that we cannot read is a bug: deny all tools.
			r.log.Error("unreadable permissions in grant; denying tools", "err", err)
			return claude.Permissions{Tools: []string{}}, nil
		}
	}
	// An alias ("sonnet") stands for the model the pinned CLI resolves it to: that full name is what the agent
	// is told to use and what the model proxy allows (allowedModels), as the agent's calls name it.
	return claude.Permissions{Tools: p.Tools, BlockedTools: p.BlockedTools, MaxTurns: p.MaxTurns,
		Model: claude.PinnedModel(p.Model)}, g.SDKConfig
}
