// Package runner is the per-user sandbox role: one process per (issuer, user), started by the scheduler's
// driver as `warren runner`. It owns the user's workspace directory and serves an internal HTTP API on
// loopback that only the edge calls, with the public paths of the sandbox API (docs/PROTOCOL.md#runner-api):
// command execution inside a bubblewrap sandbox (runner/isolate), file access confined to the workspace
// (runner/files over runner/workspace), and the agent channel over WebSocket (runner/session), plus
// /healthz and /metrics. The other features are packages of their own (runner/procs, runner/terms,
// runner/gitapi, runner/fswatch, runner/preview, runner/tasks, runner/sessionlist), each handed a small
// Host interface that this package implements (hosts.go); the Runner holds them in a list (features.go).
//
// Lifecycle: New validates the Config and prepares directories; Run listens, closes Ready once the address
// is known (see Addr), serves until its context ends, then shuts down gracefully within ShutdownTimeout,
// killing running commands and background processes and closing agent connections with 1001.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/fswatch"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/procs"
	"github.com/warren-mesh/warren/runner/session"
	"github.com/warren-mesh/warren/runner/snapshot"
	"github.com/warren-mesh/warren/runner/tasks"
	"github.com/warren-mesh/warren/runner/terms"
	"github.com/warren-mesh/warren/runner/workspace"
)

// Runner serves one user's sandbox. Create it with New.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	sandbox *isolate.Sandbox
	parts   *sandboxParts // host uid, cgroup, network; released when Run ends
	metrics *metrics

	execLimit      atomic.Int64 // concurrent execs allowed (the grant's limit)
	execsRunning   atomic.Int64
	workspaceLimit atomic.Int64 // bytes; 0: none
	disk           *diskGuard

	ready   chan struct{}
	addr    atomic.Pointer[string]
	started atomic.Bool
	clients atomic.Int64 // open agent WebSocket connections
	running atomic.Int64 // commands running

	grant  atomic.Pointer[wire.Grant] // newest grant from the edge
	agent  *agentParts                // nil without cfg.Model
	snap   *snapshot.Snapshotter      // nil without cfg.Snapshots
	snapMu sync.Mutex
	bg     sync.WaitGroup // background snapshots

	inflight   atomic.Int64      // authenticated requests being served
	lastActive atomic.Int64      // unix nanos of the last authenticated request
	stop       func(cause error) // ends Run (idle sleep, fencing); set by Run
	hub        *session.Hub
	lease      leaseWatch
	features   []feature      // the parts of the sandbox API, in closing order (features.go)
	procs      *procs.Table   // background processes
	terms      *terms.Table   // terminals
	tasks      *tasks.Table   // one-shot tasks
	watches    *fswatch.Table // file watch subscribers
}

// New validates cfg, creates the workspace (and state dir) and finds bubblewrap. Without bubblewrap and
// without cfg.Insecure it fails with ErrNoBwrap, whose message names -insecure-no-sandbox.
func New(cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.findBwrap(); err != nil {
		return nil, err
	}
	if err := cfg.prepareDirs(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, ready: make(chan struct{}), stop: func(error) {}}
	if err := r.buildSandbox(); err != nil {
		return nil, err
	}
	r.metrics = newMetrics(
		func() float64 { return float64(r.clients.Load()) },
		func() float64 { return float64(r.running.Load()) },
	)
	for _, build := range []func() error{r.buildFeatures, r.buildSnapshots, r.buildAgent} {
		if err := build(); err != nil {
			r.cleanup()
			return nil, err
		}
	}
	return r, nil
}

// cleanup undoes a New that failed after the sandbox was built: the features built so far are closed
// (nothing runs yet) and the sandbox's host uid, cgroup and network are released.
func (r *Runner) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	if err := r.closeFeatures(ctx); err != nil {
		r.log.Warn("cleanup after a failed start", "err", err)
	}
	r.parts.release()
}

// Ready is closed once Run is listening; Addr is then valid. If Run fails before listening, Ready is never
// closed, so wait on both.
func (r *Runner) Ready() <-chan struct{} { return r.ready }

// Addr is the listening address (host:port), or "" before Ready.
func (r *Runner) Addr() string {
	if a := r.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Clients is the number of agent connections open right now (the idle check will use it).
func (r *Runner) Clients() int { return int(r.clients.Load()) }

// RunningCommands is the number of exec requests whose command is running.
func (r *Runner) RunningCommands() int { return int(r.running.Load()) }

// Run listens on cfg.Listen and serves until ctx ends, then shuts down: it stops accepting, kills running
// commands, closes agent connections (1001), waits for handlers and turns, all bounded by
// ShutdownTimeout. It returns nil after a clean shutdown, and an error wrapping ErrFencedOff when it stopped
// because it was fenced (a newer epoch's snapshot, a lost owner lock, a lapsed lease). Run may be called once.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	if r.sandbox.Insecure() {
		r.log.Warn("commands run WITHOUT a sandbox (-insecure-no-sandbox): they can read and write anything this process can")
	}
	if r.cfg.Listener != nil {
		defer r.cfg.Listener.Close() // also on the early returns below; a second close is harmless
	}
	defer r.parts.release()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r.stop = stop
	defer r.stopLeaseWatch()
	if err := r.restore(ctx); err != nil {
		return err
	}
	r.procs.Load(ctx)
	if err := r.giveFiles(); err != nil {
		return err
	}
	root, err := workspace.Open(r.cfg.Workspace)
	if err != nil {
		return err
	}
	defer root.Close()
	if r.agent != nil {
		url, err := r.agent.proxy.Start("127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("model proxy: %w", err)
		}
		r.agent.proxyURL = url
	}
	proxyURL := ""
	if r.agent != nil {
		proxyURL = r.agent.proxyURL
	}
	if err := r.attachNetwork(proxyURL); err != nil {
		return err
	}
	ln := r.cfg.Listener
	if ln == nil {
		if ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", r.cfg.Listen); err != nil {
			return fmt.Errorf("listen %s: %w", r.cfg.Listen, err)
		}
	}

	var extra map[string]any
	if r.cfg.Model != nil && r.cfg.Model.Notice != "" {
		extra = map[string]any{"notice": r.cfg.Model.Notice}
	}
	hub := session.NewHub(session.Config{
		Region:     r.cfg.Region,
		Agent:      r.cfg.Agent,
		Logger:     r.log.With("component", "agent"),
		ReadyExtra: extra,
		Metrics:    r.metrics.reg,
	})
	r.hub = hub
	// Request contexts derive from work, not from ctx, so that shutdown decides when in-flight work ends.
	work, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)
	var conns sync.WaitGroup // hijacked connections (agent, terminals), which http.Server.Shutdown does not wait for
	a := &api{r: r, root: root, hub: hub, work: work, conns: &conns}
	// The edge forwards what a client sent with headers of its own (the grant, a preview's cookies): twice
	// the bound of the edge's own listener.
	srv := httpx.NewServer(a.routes(), httpx.Config{MaxHeaderBytes: 2 * httpx.DefaultMaxHeaderBytes, Logger: r.log})
	srv.BaseContext = func(net.Listener) context.Context { return work }

	addr := ln.Addr().String()
	r.addr.Store(&addr)
	close(r.ready)
	mode := "bwrap"
	if r.sandbox.Insecure() {
		mode = "insecure"
	}
	r.log.Info("runner listening", "addr", addr, "workspace", r.cfg.Workspace, "sandbox", mode)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		r.idleLoop(gctx, func() bool {
			return r.inflight.Load() > 0 || r.busy(r.cfg.Now())
		})
		return nil
	})
	g.Go(func() error {
		r.watchNetwork(gctx, hub)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		r.log.Info("stopping", "cause", context.Cause(gctx))
		err := r.shutdown(srv, stopWork, &conns)
		return errors.Join(err, r.afterShutdown(context.Cause(ctx)))
	})
	err = g.Wait()
	if cause := context.Cause(ctx); errors.Is(cause, ErrFencedOff) {
		// Fenced (a newer epoch, a lost lock or a lapsed lease): the caller exits with a failure.
		err = errors.Join(err, cause)
	}
	return err
}

func (r *Runner) shutdown(srv *http.Server, stopWork context.CancelCauseFunc, conns *sync.WaitGroup) error {
	r.log.Info("runner shutting down", "running_commands", r.RunningCommands(), "clients", r.Clients())
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	stopWork(ErrShuttingDown)
	var errs []error
	if err := srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("drain requests: %w", err))
		_ = srv.Close()
	}
	// Hijacked (WebSocket) handlers are not tracked by Shutdown; conns is.
	done := make(chan struct{})
	go func() { conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("close agent connections: %w", ctx.Err()))
	}
	// The agent channel's hub first, then the programs (features.go).
	if err := r.closeFeatures(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	r.log.Info("runner stopped")
	return nil
}
