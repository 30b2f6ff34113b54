package runner

import (
	"context"
	"errors"
	"time"

	"github.com/warren-mesh/warren/runner/files"
	"github.com/warren-mesh/warren/runner/fswatch"
	"github.com/warren-mesh/warren/runner/gitapi"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/preview"
	"github.com/warren-mesh/warren/runner/procs"
	"github.com/warren-mesh/warren/runner/sessionlist"
	"github.com/warren-mesh/warren/runner/tasks"
	"github.com/warren-mesh/warren/runner/terms"
)

// feature is one part of the sandbox API (runner/procs, runner/terms, ...). The Runner holds its features
// in a list, built by New, so that mounting the routes, the idle check, shutdown and the cleanup after a
// failed start are loops over it: a new feature is one entry, not three places to remember. Busy and
// Close may be called concurrently with requests.
type feature interface {
	// Routes mounts the feature's routes on s, once per Run.
	Routes(s web.Serve)
	// Busy reports whether the feature keeps the sandbox awake at now.
	Busy(now time.Time) bool
	// Close refuses new work and ends what the feature runs, waiting until ctx ends.
	Close(ctx context.Context) error
}

var (
	_ feature = (*procs.Table)(nil)
	_ feature = (*terms.Table)(nil)
	_ feature = (*gitapi.API)(nil)
	_ feature = (*fswatch.Table)(nil)
	_ feature = (*files.API)(nil)
	_ feature = (*preview.Relay)(nil)
	_ feature = (*tasks.Table)(nil)
	_ feature = (*sessionlist.Index)(nil)
)

// own is a feature written in package runner: routes on the Run's api, and optionally a busy predicate
// and a close.
type own struct {
	r      *Runner
	routes func(a *api, s web.Serve)
	busy   func(now time.Time) bool
	close  func(ctx context.Context) error
}

func (o own) Routes(s web.Serve)      { o.routes(o.r.apiOf(s), s) }
func (o own) Busy(now time.Time) bool { return o.busy != nil && o.busy(now) }
func (o own) Close(ctx context.Context) error {
	if o.close == nil {
		return nil
	}
	return o.close(ctx)
}

// buildFeatures makes the features, in the order they are closed at shutdown: the agent channel first
// (its turns use the sandbox), then the programs.
func (r *Runner) buildFeatures() error {
	taskStore, taskPrefix, err := r.openTaskStore()
	if err != nil {
		return err
	}
	r.tasks = tasks.New(tasks.Config{Host: taskHost{r}, Options: r.cfg.Tasks, Store: taskStore, Prefix: taskPrefix,
		Logger: r.log, Now: r.cfg.Now, Metrics: r.metrics.reg, Workspace: r.cfg.Workspace, Issuer: r.cfg.Issuer})
	r.procs = procs.New(procs.Config{Host: procHost{r}, Logger: r.log, Now: r.cfg.Now, Metrics: r.metrics.reg,
		Epoch: r.cfg.Epoch, LogBytes: r.cfg.ProcessLogBytes, DefaultWait: r.cfg.DefaultExecTimeout,
		MaxWait: r.cfg.MaxExecTimeout, Store: taskStore, Prefix: taskPrefix})
	r.terms = terms.New(terms.Config{Host: termHost{r}, Logger: r.log, Now: r.cfg.Now, Metrics: r.metrics.reg})
	sessions := sessionlist.Config{Host: sessionHost{r}}
	if r.cfg.Model != nil {
		sessions.Home, sessions.Prices = r.cfg.Model.Home, r.cfg.Model.Prices
	}
	r.watches = fswatch.New(fswatch.Config{Host: watchHost{r}, Logger: r.log, Metrics: r.metrics.reg, Ops: r.metrics.fileOps})
	r.features = []feature{
		own{r: r, routes: (*api).agentRoutes, close: r.closeHub,
			busy: func(time.Time) bool { return r.Clients() > 0 || r.hub != nil && r.hub.RunningTurns() > 0 }},
		own{r: r, routes: (*api).execRoutes, busy: func(time.Time) bool { return r.RunningCommands() > 0 }},
		r.procs,
		r.terms,
		r.tasks,
		files.New(files.Config{Host: filesHost{r}, Ops: r.metrics.fileOps, MaxFileSize: r.cfg.MaxFileSize}),
		r.watches,
		preview.New(preview.Config{Host: previewHost{r}, Metrics: r.metrics.reg, HostLoopback: r.cfg.PreviewHostLoopback}),
		sessionlist.New(sessions),
		gitapi.New(gitapi.Config{Host: gitHost{r}, Metrics: r.metrics.reg, Insecure: r.sandbox.Insecure(),
			Workspace: r.cfg.Workspace, DefaultTimeout: r.cfg.DefaultExecTimeout, MaxTimeout: r.cfg.MaxExecTimeout,
			User: r.cfg.User, Issuer: r.cfg.Issuer, SpoolDir: r.cfg.StateDir, MaxFileSize: r.cfg.MaxFileSize}),
	}
	return nil
}

// busy reports whether any feature keeps the sandbox awake at now.
func (r *Runner) busy(now time.Time) bool {
	for _, f := range r.features {
		if f.Busy(now) {
			return true
		}
	}
	return false
}

// closeFeatures closes every feature, in order, each bounded by ctx.
func (r *Runner) closeFeatures(ctx context.Context) error {
	var errs []error
	for _, f := range r.features {
		if err := f.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// closeHub closes the agent channel's hub, if Run made one.
func (r *Runner) closeHub(ctx context.Context) error {
	if r.hub == nil {
		return nil
	}
	return r.hub.Close(ctx)
}

// apiOf is the api of the Run that handed s to the features.
func (r *Runner) apiOf(s web.Serve) *api {
	return &api{r: r, root: s.Root, hub: r.hub, work: s.Work, conns: s.Conns}
}
