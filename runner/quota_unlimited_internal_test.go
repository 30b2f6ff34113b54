package runner

import (
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// A careless operator's attack on the per-user limits: a runner whose -max-tasks is above the hard ceiling
// (the flag has no bound of its own), and a user whose quota says -1 (unlimited) for tasks, or a positive
// value between the ceiling and the flag. "Unlimited" must never give the user less than the runner's own
// default would: the ceiling is at least the flag.
func TestQuotaUnlimitedNeverBelowTheFlag(t *testing.T) {
	const flag = 2 * ceilingTasks
	r := &Runner{cfg: Config{MaxProcesses: 16, ProcessLogBytes: 1 << 20, Tasks: TaskConfig{MaxActive: flag}}}
	for _, tc := range []struct {
		name string
		in   int64
		want int
	}{
		{"not set", 0, flag},
		{"unlimited", -1, flag},
		{"between the ceiling and the flag", ceilingTasks + 1, ceilingTasks + 1},
		{"past the flag", 1 << 40, flag},
		{"below the ceiling", 3, 3},
	} {
		r.grant.Store(&wire.Grant{Limits: &wire.SandboxLimits{Tasks: tc.in}})
		if got := r.taskLimit(r.cfg.Tasks.MaxActive); got != tc.want {
			t.Errorf("%s: max_tasks %d with -max-tasks %d gives %d, want %d", tc.name, tc.in, flag, got, tc.want)
		}
	}
}
