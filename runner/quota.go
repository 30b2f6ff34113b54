package runner

import (
	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/fswatch"
)

// The per-user limits of a quota that were runner flags (billing.SandboxQuota's max_background_processes,
// max_process_log_bytes, max_file_watches, max_terminals, max_tasks), read from the newest grant when a
// request would take one more: 0 (not set) is the runner's flag or default, a positive value the limit, and
// -1 (unlimited) the hard ceiling below, which also caps a positive value, as maxSlots caps the exec
// semaphore whatever a quota says. Each costs the runner memory and descriptors outside the sandbox's
// cgroup, so none is ever without a bound.
const (
	ceilingBackgroundProcesses = 1024 // as the -max-processes flag's own bound
	ceilingFileWatches         = 64   // each a goroutine and a queue; the watched directories are bounded apart
	ceilingTerminals           = 64   // each a pseudo-terminal and its replay buffer
	ceilingTasks               = 256  // queued or running, each a live record
)

// quotaLimit is the grant's value of one of those limits: def when not set, ceiling when unlimited, else
// the value, at most ceiling. A flag above the ceiling (the operator's choice) raises it: unlimited never
// gives less than not set.
func (r *Runner) quotaLimit(field func(*wire.SandboxLimits) int64, def, ceiling int64) int64 {
	ceiling = max(ceiling, def)
	var v int64
	if g := r.Grant(); g.Limits != nil {
		v = field(g.Limits)
	}
	switch {
	case v == 0:
		return def
	case v < 0 || v > ceiling:
		return ceiling
	}
	return v
}

// backgroundProcessLimit is the running background processes the sandbox may have (max_background_processes,
// else -max-processes).
func (r *Runner) backgroundProcessLimit() int {
	return int(r.quotaLimit(func(l *wire.SandboxLimits) int64 { return l.BackgroundProcesses }, int64(r.cfg.MaxProcesses),
		ceilingBackgroundProcesses))
}

// processLogLimit is the output kept of a background process started now (max_process_log_bytes, else
// -process-log-bytes). The billing API refuses -1 for it: a negative value reads as not set, and the value
// is at most billing.MaxSandboxProcessLogBytes.
func (r *Runner) processLogLimit() int64 {
	return r.quotaLimit(func(l *wire.SandboxLimits) int64 { return max(l.ProcessLogBytes, 0) }, r.cfg.ProcessLogBytes,
		billing.MaxSandboxProcessLogBytes)
}

// fileWatchLimit is the file watch subscribers the sandbox may have (max_file_watches, else fswatch.Max).
func (r *Runner) fileWatchLimit() int {
	return int(r.quotaLimit(func(l *wire.SandboxLimits) int64 { return l.FileWatches }, fswatch.Max, ceilingFileWatches))
}

// terminalLimit is the running terminals the sandbox may have (max_terminals, else MaxTerminals).
func (r *Runner) terminalLimit() int {
	return int(r.quotaLimit(func(l *wire.SandboxLimits) int64 { return l.Terminals }, MaxTerminals, ceilingTerminals))
}

// taskLimit is the tasks the user may have queued or running (max_tasks, else -max-tasks).
func (r *Runner) taskLimit(def int) int {
	return int(r.quotaLimit(func(l *wire.SandboxLimits) int64 { return l.Tasks }, int64(def), ceilingTasks))
}
