package runner

import "testing"

// The workspace watchers of many running processes (and commands) share a measurement: sixteen of them
// polling at once walk the workspace (whose entries the tenant multiplies) once, not sixteen times.
func TestDiskWatchersShareAWalk(t *testing.T) {
	g := &diskGuard{dir: t.TempDir(), limit: func() int64 { return 1 << 40 }}
	for range 16 {
		g.usage(diskPoll / 2) // what each watcher's tick measures
	}
	if n := g.walks.Load(); n != 1 {
		t.Fatalf("%d walks of the workspace for 16 watchers' ticks", n)
	}
}
