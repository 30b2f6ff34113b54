package runner

import (
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/fswatch"
)

// The per-user limits from a grant: not set is the runner's flag or default, a value is the limit, and
// -1 (unlimited) or a value past the hard ceiling is the ceiling; a negative process log size (which the
// billing API refuses) is not set, and one past billing's ceiling is that ceiling.
func TestQuotaLimitCeilings(t *testing.T) {
	r := &Runner{cfg: Config{MaxProcesses: 16, ProcessLogBytes: 1 << 20, Tasks: TaskConfig{MaxActive: 4}}}
	type limits struct{ procs, watches, terms, tasks int }
	get := func(l *wire.SandboxLimits) (limits, int64) {
		r.grant.Store(&wire.Grant{Limits: l})
		return limits{r.backgroundProcessLimit(), r.fileWatchLimit(), r.terminalLimit(), r.taskLimit(r.cfg.Tasks.MaxActive)},
			r.processLogLimit()
	}
	for _, tc := range []struct {
		name string
		in   *wire.SandboxLimits
		want limits
		log  int64
	}{
		{"no limits", nil, limits{16, fswatch.Max, MaxTerminals, 4}, 1 << 20},
		{"not set", &wire.SandboxLimits{MemoryBytes: 1 << 30}, limits{16, fswatch.Max, MaxTerminals, 4}, 1 << 20},
		{"set", &wire.SandboxLimits{BackgroundProcesses: 2, FileWatches: 3, Terminals: 4, Tasks: 5, ProcessLogBytes: 8192},
			limits{2, 3, 4, 5}, 8192},
		{"unlimited", &wire.SandboxLimits{BackgroundProcesses: -1, FileWatches: -1, Terminals: -1, Tasks: -1, ProcessLogBytes: -1},
			limits{ceilingBackgroundProcesses, ceilingFileWatches, ceilingTerminals, ceilingTasks}, 1 << 20},
		{"past the ceilings", &wire.SandboxLimits{BackgroundProcesses: 1 << 40, FileWatches: 1 << 40, Terminals: 1 << 40,
			Tasks: 1 << 40, ProcessLogBytes: 1 << 40},
			limits{ceilingBackgroundProcesses, ceilingFileWatches, ceilingTerminals, ceilingTasks}, billing.MaxSandboxProcessLogBytes},
	} {
		if got, log := get(tc.in); got != tc.want || log != tc.log {
			t.Errorf("%s: %+v, log %d; want %+v, log %d", tc.name, got, log, tc.want, tc.log)
		}
	}
}
