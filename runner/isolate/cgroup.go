package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Limits are a sandbox's hard limits. Zero (or less) in a field means no limit of that kind.
type Limits struct {
	// Processes caps the tasks alive in the sandbox at once, all of its commands together (pids).
	Processes int64
	// MemoryBytes caps the memory of all of its commands together, tmpfs pages included; the kernel kills
	// a command of the sandbox when it is exceeded.
	MemoryBytes int64
	// CPUMillis caps its CPU time in thousandths of a core (1000: one core).
	CPUMillis int64
	// TmpBytes sizes each command's private /tmp (and /dev/shm).
	TmpBytes int64
	// FileBytes caps the size of any one file a command writes (RLIMIT_FSIZE; the write fails with EFBIG).
	FileBytes int64
}

// CgroupMount is where the cgroup file systems are mounted.
const CgroupMount = "/sys/fs/cgroup"

// Cgroup is one sandbox's control group: every command of the sandbox runs in it (see Sandbox.command), so
// its limits hold for all of them together. It works on cgroup v1 (the pids, memory and cpu controllers)
// and v2 through containerd's cgroups library.
type Cgroup struct {
	mu   sync.Mutex
	v1   cgroup1.Cgroup
	v2   *cgroup2.Manager
	rel  string // path below each hierarchy's root
	dead bool
}

// NewCgroup creates the control group parent/name (parent like "/warren") with limits l.
func NewCgroup(parent, name string, l Limits) (*Cgroup, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("%w: cgroup name %q", ErrConfig, name)
	}
	if !path.IsAbs(parent) || path.Clean(parent) != parent {
		return nil, fmt.Errorf("%w: cgroup parent %q must be an absolute clean path", ErrConfig, parent)
	}
	c := &Cgroup{rel: path.Join(parent, name)}
	var err error
	if cgroups.Mode() == cgroups.Unified {
		c.v2, err = cgroup2.NewManager(CgroupMount, c.rel, v2Resources(l))
	} else {
		c.v1, err = cgroup1.New(cgroup1.StaticPath(c.rel), v1Resources(l), cgroup1.WithHierarchy(v1Hierarchy))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: create cgroup %s: %w", ErrConfig, c.rel, err)
	}
	return c, nil
}

// v1Hierarchy is the controllers a v1 sandbox cgroup uses (cpuacct for accounting only); no cpuset, devices
// or freezer groups are made.
func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	return []cgroup1.Subsystem{cgroup1.NewPids(CgroupMount), cgroup1.NewMemory(CgroupMount), cgroup1.NewCpu(CgroupMount), cgroup1.NewCpuacct(CgroupMount)}, nil
}

const cfsPeriod = 100_000 // µs

func v1Resources(l Limits) *specs.LinuxResources {
	pids := int64(-1)
	if l.Processes > 0 {
		pids = l.Processes
	}
	r := &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &pids}, Memory: &specs.LinuxMemory{}, CPU: &specs.LinuxCPU{}}
	mem := int64(-1)
	if l.MemoryBytes > 0 {
		mem = l.MemoryBytes
	}
	r.Memory.Limit = &mem
	period, quota := uint64(cfsPeriod), int64(-1)
	if l.CPUMillis > 0 {
		quota = l.CPUMillis * cfsPeriod / 1000
	}
	r.CPU.Period, r.CPU.Quota = &period, &quota
	return r
}

func v2Resources(l Limits) *cgroup2.Resources {
	r := &cgroup2.Resources{Pids: &cgroup2.Pids{Max: 0}, Memory: &cgroup2.Memory{}, CPU: &cgroup2.CPU{}}
	if l.Processes > 0 {
		r.Pids.Max = l.Processes
	}
	mem := int64(-1)
	if l.MemoryBytes > 0 {
		mem = l.MemoryBytes
	}
	r.Memory.Max = &mem
	oomGroup := false
	r.Memory.OOMGroup = &oomGroup
	period, quota := uint64(cfsPeriod), int64(-1)
	if l.CPUMillis > 0 {
		quota = l.CPUMillis * cfsPeriod / 1000
	}
	r.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
	return r
}

// Update changes the limits of the group (and of commands running in it).
func (c *Cgroup) Update(l Limits) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return fmt.Errorf("cgroup %s: %w", c.rel, os.ErrClosed)
	}
	var err error
	if c.v2 != nil {
		err = c.v2.Update(v2Resources(l))
	} else {
		err = c.v1.Update(v1Resources(l))
	}
	if err != nil {
		return fmt.Errorf("update cgroup %s: %w", c.rel, err)
	}
	return nil
}

// add moves pid (and the threads it has) into the group.
func (c *Cgroup) add(pid int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return fmt.Errorf("cgroup %s: %w", c.rel, os.ErrClosed)
	}
	if c.v2 != nil {
		return c.v2.AddProc(uint64(pid))
	}
	return c.v1.AddProc(uint64(pid))
}

// OOMKills is the number of times the kernel killed a process of the group for memory, from memory.events
// (v2) or memory.oom_control (v1); -1 when it cannot be read.
func (c *Cgroup) OOMKills() int64 {
	file := filepath.Join(CgroupMount, "memory", c.rel, "memory.oom_control")
	if c.v2 != nil {
		file = filepath.Join(CgroupMount, c.rel, "memory.events")
	}
	f, err := os.Open(file)
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// Close kills what still runs in the group and removes it. It is idempotent.
func (c *Cgroup) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil
	}
	c.dead = true
	var err error
	if c.v2 != nil {
		_ = c.v2.Kill()
		err = c.v2.Delete()
	} else {
		for _, p := range must(c.v1.Processes(cgroup1.Pids, true)) {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
		err = c.v1.Delete()
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", c.rel, err)
	}
	return nil
}

func must[T any](v T, _ error) T { return v }
