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

// The network's part of a sandbox's group (see Cgroup): pasta keeps no dynamic allocations (about 30 MiB
// resident, its static buffers), the holder is one cat; the bound leaves room for the kernel memory of its
// tap device and sockets. It comes on top of the sandbox's own memory limit.
const (
	NetworkMemoryBytes = 128 << 20
	networkProcesses   = 16
)

// Cgroup is one sandbox's control group, parent/name, in two parts (the same on cgroup v1 and v2):
//
//   - commands: every command of the sandbox (see Sandbox.command), with the sandbox's memory and process
//     limits, so they hold for all of its commands together;
//   - network: pasta and the namespace's holder (NetworkConfig.Cgroup), with a fixed bound of their own
//     (NetworkMemoryBytes).
//
// The CPU quota is on the group itself, shared by both parts. A tenant filling its memory (tmpfs pages
// no process owns, say) makes the kernel kill one of the commands, never pasta: the OOM killer of a group
// chooses among that group's processes only. It works on cgroup v1 (the pids, memory and cpu controllers)
// and v2 through containerd's cgroups library.
type Cgroup struct {
	mu                     sync.Mutex // guards dead and the groups' use
	rel                    string     // the sandbox's group, below each hierarchy's root
	top, commands, network node
	dead                   bool
}

// node is one control group of a sandbox's: v1 (one directory per controller) or v2.
type node struct {
	v1  cgroup1.Cgroup
	v2  *cgroup2.Manager
	rel string
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
	if err := c.create(l); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w: create cgroup %s: %w", ErrConfig, c.rel, err)
	}
	return c, nil
}

// create makes the group and its two parts.
func (c *Cgroup) create(l Limits) error {
	top, cmds := splitLimits(l)
	net := Limits{Processes: networkProcesses, MemoryBytes: NetworkMemoryBytes}
	c.top.rel, c.commands.rel, c.network.rel = c.rel, path.Join(c.rel, "commands"), path.Join(c.rel, "network")
	var err error
	if cgroups.Mode() == cgroups.Unified {
		if c.top.v2, err = cgroup2.NewManager(CgroupMount, c.rel, v2Resources(top)); err != nil {
			return err
		}
		if c.commands.v2, err = c.top.v2.NewChild("commands", v2Resources(cmds)); err != nil {
			return err
		}
		c.network.v2, err = c.top.v2.NewChild("network", v2Resources(net))
		return err
	}
	if c.top.v1, err = cgroup1.New(cgroup1.StaticPath(c.rel), v1Resources(top), cgroup1.WithHierarchy(v1Hierarchy)); err != nil {
		return err
	}
	if c.commands.v1, err = c.top.v1.New("commands", v1Resources(cmds)); err != nil {
		return err
	}
	c.network.v1, err = c.top.v1.New("network", v1Resources(net))
	return err
}

// splitLimits divides l between the group itself (the CPU quota, shared by its parts) and its commands
// (processes and memory).
func splitLimits(l Limits) (top, commands Limits) {
	return Limits{CPUMillis: l.CPUMillis}, Limits{Processes: l.Processes, MemoryBytes: l.MemoryBytes}
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
	top, cmds := splitLimits(l)
	if err := errors.Join(c.top.update(top), c.commands.update(cmds)); err != nil {
		return fmt.Errorf("update cgroup %s: %w", c.rel, err)
	}
	return nil
}

func (n *node) update(l Limits) error {
	if n.v2 != nil {
		return n.v2.Update(v2Resources(l))
	}
	return n.v1.Update(v1Resources(l))
}

// add moves pid (and the threads it has) into the commands' part of the group.
func (c *Cgroup) add(pid int) error { return c.addTo(&c.commands, pid) }

// addNetwork moves pid into the network's part of the group.
func (c *Cgroup) addNetwork(pid int) error { return c.addTo(&c.network, pid) }

func (c *Cgroup) addTo(n *node, pid int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return fmt.Errorf("cgroup %s: %w", c.rel, os.ErrClosed)
	}
	if n.v2 != nil {
		return n.v2.AddProc(uint64(pid))
	}
	return n.v1.AddProc(uint64(pid))
}

// OOMKills is the number of times the kernel killed a command of the group for memory, from memory.events
// (v2) or memory.oom_control (v1) of its commands' part; -1 when it cannot be read.
func (c *Cgroup) OOMKills() int64 { return c.commands.oomKills() }

func (n *node) oomKills() int64 {
	file := filepath.Join(CgroupMount, "memory", n.rel, "memory.oom_control")
	if n.v2 != nil {
		file = filepath.Join(CgroupMount, n.rel, "memory.events")
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

// Close kills what still runs in the group (both parts) and removes it. It is idempotent.
func (c *Cgroup) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil
	}
	c.dead = true
	switch {
	case c.top.v2 != nil:
		_ = c.top.v2.Kill() // cgroup.kill: the parts too
	case c.top.v1 != nil:
		for _, p := range must(c.top.v1.Processes(cgroup1.Pids, true)) {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	}
	var errs []error
	for _, n := range []*node{&c.commands, &c.network, &c.top} { // a group goes after its parts
		if err := n.delete(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", c.rel, err)
	}
	return nil
}

// delete removes the group (nothing when it was never made).
func (n *node) delete() error {
	switch {
	case n.v2 != nil:
		return n.v2.Delete()
	case n.v1 != nil:
		return n.v1.Delete()
	}
	return nil
}

func must[T any](v T, _ error) T { return v }

// Pids lists the processes of the group's commands' part (its cgroup.procs, subgroups included); nil when
// it cannot be read.
func (c *Cgroup) Pids() []int {
	dir := filepath.Join(CgroupMount, c.commands.rel)
	if c.commands.v2 == nil {
		dir = filepath.Join(CgroupMount, "pids", c.commands.rel)
	}
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}
