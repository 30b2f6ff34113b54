package runner

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/session"
	"github.com/warren-mesh/warren/runner/terms"
)

// The host interfaces of the feature packages, each served by the Runner: a feature sees only what it
// uses (its package declares the interface).

// Bounds of terminals (runner/terms).
const (
	// MaxTerminals bounds the terminals running at once in a sandbox unless the quota's max_terminals says
	// otherwise; as many exited ones are kept.
	MaxTerminals = terms.Max
	// TermReplayBytes is the output a terminal keeps for replay when a client attaches.
	TermReplayBytes = terms.ReplayBytes
	// MaxTermAttached bounds the clients attached to one terminal at once.
	MaxTermAttached = terms.MaxAttached
)

// procHost is procs.Host.
type procHost struct{ r *Runner }

func (h procHost) Start(ctx context.Context, spec isolate.ProcessSpec) (*isolate.Process, error) {
	return h.r.sandbox.Start(ctx, spec)
}
func (h procHost) Admit() error                                             { return h.r.disk.admit() }
func (h procHost) WatchDisk(ctx context.Context, c context.CancelCauseFunc) { h.r.disk.watch(ctx, c) }
func (h procHost) Limit() int                                               { return h.r.backgroundProcessLimit() }
func (h procHost) LogLimit() int64                                          { return h.r.processLogLimit() }
func (h procHost) KeepAwake(running int, now time.Time) bool                { return h.r.keptAwake(running, now) }

// termHost is terms.Host.
type termHost struct{ r *Runner }

func (h termHost) Start(ctx context.Context, spec isolate.ProcessSpec, cols, rows int) (*isolate.Terminal, error) {
	return h.r.sandbox.StartTerminal(ctx, spec, cols, rows)
}
func (h termHost) Admit() error                                             { return h.r.disk.admit() }
func (h termHost) WatchDisk(ctx context.Context, c context.CancelCauseFunc) { h.r.disk.watch(ctx, c) }
func (h termHost) Limit() int                                               { return h.r.terminalLimit() }
func (h termHost) KeepAwake(running int, now time.Time) bool                { return h.r.keptAwake(running, now) }

// keptAwake reports whether running programs (processes, terminals) keep the sandbox awake now: while one
// runs and the last request is less than ProcessKeepAwake ago.
func (r *Runner) keptAwake(running int, now time.Time) bool {
	if r.cfg.ProcessKeepAwake < 0 || running == 0 {
		return false
	}
	return now.Sub(time.Unix(0, r.lastActive.Load())) < r.cfg.ProcessKeepAwake
}

// gitHost is gitapi.Host.
type gitHost struct{ r *Runner }

func (h gitHost) Run(ctx context.Context, spec isolate.Spec) (isolate.Result, error) {
	return h.r.runCommand(ctx, spec)
}

// watchHost is fswatch.Host.
type watchHost struct{ r *Runner }

func (h watchHost) Limit() int { return h.r.fileWatchLimit() }

// filesHost is files.Host.
type filesHost struct{ r *Runner }

func (h filesHost) Reserve(n int64) (func(), error) {
	if err := h.r.disk.checkWith(n); err != nil {
		return nil, err
	}
	h.r.disk.inflight.Add(n)
	return func() { h.r.disk.inflight.Add(-n) }, nil
}
func (h filesHost) Check() error          { return h.r.disk.check() }
func (h filesHost) WorkspaceLimit() int64 { return h.r.workspaceLimit.Load() }
func (h filesHost) Owner() (int, bool) {
	if h.r.parts.uid == nil {
		return 0, false
	}
	return int(h.r.parts.uid.UID), true
}

// taskHost is tasks.Host.
type taskHost struct{ r *Runner }

func (h taskHost) Limit(def int) int { return h.r.taskLimit(def) }
func (h taskHost) Grant() wire.Grant { return h.r.Grant() }
func (h taskHost) Hub() *session.Hub { return h.r.hub }

// sessionHost is sessionlist.Host.
type sessionHost struct{ r *Runner }

func (h sessionHost) Hub() *session.Hub { return h.r.hub }

// Snapshot starts a snapshot in the background; Run's end waits for it (afterShutdown).
func (h sessionHost) Snapshot(ctx context.Context, why string) {
	h.r.bg.Add(1)
	go func() {
		defer h.r.bg.Done()
		h.r.snapshot(ctx, why)
	}()
}

// previewHost is preview.Host.
type previewHost struct{ r *Runner }

func (h previewHost) OwnPort(port int) bool     { return h.r.ownPort(port) }
func (h previewHost) Network() *isolate.Network { return h.r.network() }

// ownPort reports whether port is one the runner itself listens on (its API, its model proxy): never
// relayed, even where the sandbox shares the host's network or reaches the port through pasta.
func (r *Runner) ownPort(port int) bool {
	own := []string{}
	if a := r.addr.Load(); a != nil {
		own = append(own, *a)
	}
	if r.agent != nil && r.agent.proxyURL != "" {
		if u, err := url.Parse(r.agent.proxyURL); err == nil {
			own = append(own, u.Host)
		}
	}
	for _, hp := range own {
		if _, ps, err := net.SplitHostPort(hp); err == nil && ps == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// network is the sandbox's own network namespace; nil when it shares the host's network.
func (r *Runner) network() *isolate.Network {
	if r.parts == nil {
		return nil
	}
	return r.parts.network
}
