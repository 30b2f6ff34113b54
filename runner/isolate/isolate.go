// Package isolate runs one user command inside the sandbox boundary: a bubblewrap (bwrap) sandbox running
// as an unprivileged host uid of the sandbox's own (AllocateUID) in a user namespace, with its own PID,
// IPC, UTS, cgroup and network namespaces (NewNetwork: a veth pair or pasta, and an egress filter), a
// seccomp filter, read-only system directories, a minimal /etc, a private sized /tmp and the user's workspace at
// /workspace, a cleared environment, a wall-clock timeout that kills the whole tree, and nothing else of
// the host visible. Run runs a command to completion with captured output; Start runs a long-lived program
// (the agent CLI) under the same boundary with pipes, extra bind mounts and a kill of its whole tree on
// Close or when its context ends. SECURITY.md at the repository's root says what each layer guarantees.
//
// Insecure mode runs the same command line directly (no namespaces, no mount isolation) with the same
// cleared environment and the working directory inside the host workspace; it exists for machines without
// bubblewrap and must be chosen explicitly.
//
// Resource limits (Limits): processes, memory and CPU for all of a sandbox's commands together through its
// Cgroup, which every command enters before bubblewrap runs; per command the size of /tmp and /dev/shm and
// of any one file (RLIMIT_FSIZE); and the wall-clock timeout. No RLIMIT_NPROC (it counts every process of
// the uid host-wide) and no RLIMIT_AS (it breaks runtimes that reserve address space).
package isolate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/wire"
)

// ExitTimedOut is the exit code reported for a command killed because its timeout expired (Result.TimedOut
// is set too). It is -1 rather than GNU timeout's 124 because 124 is a real exit status a command may use.
const ExitTimedOut = -1

// waitDelay bounds how long output is drained after the command exits, for descendants that escaped the
// process group (insecure mode only) while still holding the output pipes.
const waitDelay = 2 * time.Second

// Config configures a Sandbox.
type Config struct {
	// Workspace is the host directory mounted read-write at /workspace. It must exist and be absolute.
	Workspace string
	// Bwrap is the bubblewrap binary; required unless Insecure.
	Bwrap string
	// Insecure runs commands without bubblewrap.
	Insecure bool
	// HostUID and HostGID are the unprivileged host ids the sandbox runs as (see AllocateUID); the sandbox's
	// user (SandboxUID inside its user namespace) maps to them. Required when the runner runs as root;
	// otherwise they must be unset (the sandbox then maps to the runner's own unprivileged ids).
	HostUID, HostGID uint32
	// Network is the sandbox's own network (NewNetwork); it may also be attached later with SetNetwork
	// (a runner makes it once its model proxy listens). Commands need it unless HostNetwork.
	Network *Network
	// HostNetwork shares the runner's network namespace with the sandbox: every host listener on loopback
	// is reachable from it. Only for development machines where the runner is not root, chosen explicitly.
	HostNetwork bool
	// Cgroup, when set, holds every command of the sandbox (NewCgroup), so its limits apply to them all.
	Cgroup *Cgroup
	// Limits are the initial per-command limits (TmpBytes, FileBytes); SetLimits changes them.
	Limits Limits
	// Now is the clock used to measure durations; nil means time.Now.
	Now func() time.Time
}

// Sandbox runs commands for one workspace. It is safe for concurrent use.
type Sandbox struct {
	cfg     Config
	mounts  []string // system directories
	etc     []string // the host's allowed /etc entries
	seccomp []byte
	limits  atomic.Pointer[Limits]
	network atomic.Pointer[Network]
}

// New validates cfg and inspects the host's system directories once.
func New(cfg Config) (*Sandbox, error) {
	if !filepath.IsAbs(cfg.Workspace) {
		return nil, fmt.Errorf("%w: workspace %q is not an absolute path", ErrConfig, cfg.Workspace)
	}
	if fi, err := os.Stat(cfg.Workspace); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: workspace %s is not a directory", ErrConfig, cfg.Workspace)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sandbox{cfg: cfg}
	s.limits.Store(&cfg.Limits)
	if cfg.Network != nil {
		s.network.Store(cfg.Network)
	}
	if cfg.Insecure {
		return s, nil
	}
	if cfg.Bwrap == "" {
		return nil, ErrNoBwrap
	}
	fi, err := os.Stat(cfg.Bwrap)
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%w: %s is not an executable file", ErrNoBwrap, cfg.Bwrap)
	}
	root := os.Geteuid() == 0
	switch {
	case root && (cfg.HostUID == 0 || cfg.HostGID == 0):
		return nil, fmt.Errorf("%w: a runner running as root needs an unprivileged host uid and gid for the sandbox (AllocateUID)", ErrConfig)
	case !root && (cfg.HostUID != 0 || cfg.HostGID != 0):
		return nil, fmt.Errorf("%w: only a runner running as root can run the sandbox as another host uid", ErrConfig)
	case cfg.Network != nil && cfg.HostNetwork:
		return nil, fmt.Errorf("%w: Network and HostNetwork are exclusive", ErrConfig)
	case cfg.Network != nil && cfg.Network.cfg.UID == cfg.HostUID:
		return nil, fmt.Errorf("%w: the network must run as a host uid other than the sandbox's", ErrConfig)
	}
	if err := checkPidfd(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// Descriptors this process inherited without close-on-exec would reach every sandbox; mark them all
	// (ExtraFiles are handed over explicitly and stay inherited).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("%w: close_range: %w", ErrConfig, err)
	}
	if cfg.HostUID != 0 {
		if err := MakeReachable(cfg.Workspace); err != nil {
			return nil, err
		}
	}
	if s.mounts, err = systemMounts("/"); err != nil {
		return nil, fmt.Errorf("prepare sandbox mounts: %w", err)
	}
	if s.etc, err = etcMounts("/"); err != nil {
		return nil, fmt.Errorf("prepare sandbox /etc: %w", err)
	}
	if s.seccomp, err = seccompFilter(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return s, nil
}

// Owner is the host uid and gid the sandbox runs as, when it runs as one of its own (a root runner).
func (s *Sandbox) Owner() (uid, gid int, ok bool) {
	return int(s.cfg.HostUID), int(s.cfg.HostGID), s.cfg.HostUID != 0
}

// SetNetwork attaches the sandbox's network; commands started from now on run in it. It fails when the
// sandbox shares the host's network, or when the network runs as the sandbox's own host uid.
func (s *Sandbox) SetNetwork(n *Network) error {
	if s.cfg.HostNetwork || s.cfg.Insecure {
		return fmt.Errorf("%w: this sandbox shares the host network", ErrConfig)
	}
	if n.cfg.UID == s.cfg.HostUID {
		return fmt.Errorf("%w: the network must run as a host uid other than the sandbox's", ErrConfig)
	}
	s.network.Store(n)
	return nil
}

// SetLimits changes the sandbox's limits: the cgroup's at once (running commands included), the
// per-command ones (/tmp size, file size) for commands started from now on.
func (s *Sandbox) SetLimits(l Limits) error {
	s.limits.Store(&l)
	if s.cfg.Cgroup != nil {
		return s.cfg.Cgroup.Update(l)
	}
	return nil
}

// OOMKills is the count of the sandbox's commands the kernel killed for memory so far; -1 without a
// cgroup.
func (s *Sandbox) OOMKills() int64 {
	if s.cfg.Cgroup == nil {
		return -1
	}
	return s.cfg.Cgroup.OOMKills()
}

// Insecure reports whether commands run without bubblewrap.
func (s *Sandbox) Insecure() bool { return s.cfg.Insecure }

// Pids lists the processes of the sandbox's commands (nil without a cgroup).
func (s *Sandbox) Pids() []int {
	if s.cfg.Cgroup == nil {
		return nil
	}
	return s.cfg.Cgroup.Pids()
}

// Spec is one command to run.
type Spec struct {
	// Command is a /bin/sh -c script when Args is empty, otherwise the program to execute with Args.
	Command string
	Args    []string
	// Dir is the working directory relative to the workspace, already confined by the caller (for
	// example with workspace.Root.Dir); "" means the workspace root.
	Dir string
	// Env is added to the minimal environment and may override it.
	Env     map[string]string
	Stdin   io.Reader // nil: empty
	Stdout  io.Writer // nil: discarded
	Stderr  io.Writer // nil: discarded
	Timeout time.Duration
}

// Result describes a finished command.
type Result struct {
	// ExitCode is the command's exit status, 128+N when it died of signal N, or ExitTimedOut.
	ExitCode int
	TimedOut bool
	// OOMKilled: the command was killed while the sandbox's cgroup hit its memory limit (set by the runner).
	OOMKilled bool
	Duration  time.Duration
}

// Run runs spec to completion and returns its result. A nonzero exit or a timeout is a Result, not an
// error. Errors are: invalid_argument *wire.Error (wrapping ErrInvalidSpec) for a malformed spec, the cause
// of ctx when ctx ended first (the command was killed), or a failure to start or wait for the process.
//
// Output is copied to Stdout and Stderr from separate goroutines as it arrives, in the reads' chunks; both
// copies have finished when Run returns. Once a writer returns an error the rest of that stream is read and
// discarded, so a failed consumer never blocks the command. Background processes do not outlive the
// command: the sandbox's PID namespace ends with it, and in insecure mode its process group is killed.
func (s *Sandbox) Run(ctx context.Context, spec Spec) (Result, error) {
	res := Result{ExitCode: -1}
	if err := Validate(spec); err != nil {
		return res, err
	}
	inner := shellArgv(spec.Command, spec.Args)
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	cmd, err := s.command(runCtx, cleanDir(spec.Dir), spec.Env, nil, inner)
	if err != nil {
		return res, err
	}
	cmd.Stdin = spec.Stdin
	// The pipes are ours, not exec's, so Wait returns as soon as the process exits and the group can be
	// killed before draining: a background child holding stdout cannot stall the request.
	outR, outW, err := os.Pipe()
	if err != nil {
		cmd.abort()
		return res, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		cmd.abort()
		outR.Close()
		outW.Close()
		return res, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW

	start := s.cfg.Now()
	err = cmd.start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if errors.Is(err, syscall.E2BIG) {
			return res, wire.Wrap(wire.InvalidArgument, fmt.Errorf("%w: %w", ErrInvalidSpec, err), "command line too long")
		}
		return res, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { drain(spec.Stdout, outR) })
	wg.Go(func() { drain(spec.Stderr, errR) })

	werr := cmd.wait()
	cmd.reapStragglers()
	cmd.settle(treeGone)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(waitDelay):
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	res.Duration = s.cfg.Now().Sub(start)
	res.ExitCode = exitCode(cmd.ProcessState)

	switch {
	case ctx.Err() != nil:
		res.ExitCode = -1
		return res, fmt.Errorf("run %s: %w", spec.Command, context.Cause(ctx))
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		res.ExitCode, res.TimedOut = ExitTimedOut, true
		return res, nil
	case cmd.ProcessState == nil:
		return res, fmt.Errorf("wait %s: %w", cmd.Path, werr)
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("wait %s: %w", cmd.Path, werr)
	}
	return res, nil
}

// cleanDir turns a confined relative directory into the slash form bwrapArgs expects ("." for the root).
func cleanDir(dir string) string {
	d := filepath.ToSlash(filepath.Clean("/" + dir))[1:]
	if d == "" {
		return "."
	}
	return d
}

// command builds the process running inner (the argv inside the sandbox) in dir (from cleanDir) with the
// minimal environment plus env, and binds (bubblewrap only). Both Run and Start go through it, so a
// long-running process gets exactly the boundary of a one-shot command.
//
// Under bubblewrap the process is a chain that keeps one pid: nsenter joins the sandbox's network
// namespace as root and switches to the sandbox's host ids (without a Network, exec does the switch), then
// a shell waits at a gate until boxCmd.start has put the pid into the sandbox's cgroup and set its rlimits,
// then bubblewrap runs: nothing of the command can run before its limits hold.
//
// The process gets its own process group so a kill reaches every descendant that did not leave it; with
// bwrap a kill also goes to the sandbox's init, whose death takes the PID namespace down (see boxCmd).
// Pdeathsig covers a runner crash (bubblewrap sets its own, --die-with-parent, after the id switch clears
// it). ctx ending kills both.
func (s *Sandbox) command(ctx context.Context, dir string, env map[string]string, binds []Bind, inner []string) (*boxCmd, error) {
	c := &boxCmd{}
	lim := *s.limits.Load()
	if s.cfg.Insecure {
		c.Cmd = exec.CommandContext(ctx, inner[0], inner[1:]...)
		c.Dir = filepath.Join(s.cfg.Workspace, filepath.FromSlash(dir))
		c.Env = environ(s.cfg.Workspace, env)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		c.Cancel = c.kill
		c.WaitDelay = waitDelay
		return c, nil
	}
	fds := &fdSet{}
	fail := func(err error) (*boxCmd, error) { fds.closeAll(); return nil, err }
	infoR, infoW, err := fds.pipe()
	if err != nil {
		return fail(fmt.Errorf("bwrap info pipe: %w", err))
	}
	gateR, gateW, err := fds.pipe()
	if err != nil {
		return fail(fmt.Errorf("gate pipe: %w", err))
	}
	network := s.network.Load()
	if network == nil && !s.cfg.HostNetwork {
		return fail(ErrNoNetwork)
	}
	if network != nil {
		if err := network.Err(); err != nil {
			return fail(err)
		}
	}
	// The gate shell (dash) names descriptors by one digit: these three come first.
	infoFd, gateFd, nsFd := fds.pass(infoW), fds.pass(gateR), 0
	if network != nil {
		nsFd = fds.lend(network.nsFile)
	}
	seccompFd, err := fds.data(s.seccomp)
	if err != nil {
		return fail(fmt.Errorf("seccomp pipe: %w", err))
	}
	if s.cfg.HostUID != 0 {
		for _, b := range binds {
			if err := MakeReachable(b.Host); err != nil {
				return fail(err)
			}
		}
	}
	dns := ""
	if network != nil {
		dns = DNSForward
	}
	etc := slices.Clone(s.etc)
	files := etcFiles(dns)
	for _, dest := range slices.Sorted(maps.Keys(files)) {
		fd, err := fds.data([]byte(files[dest]))
		if err != nil {
			return fail(fmt.Errorf("etc pipe: %w", err))
		}
		etc = append(etc, "--ro-bind-data", strconv.Itoa(fd), dest)
	}
	e := environ(WorkspaceMount, env)
	// The environment (the agent's session key among it) goes through a descriptor, not the command
	// line, which every user of the host can read in /proc.
	var envArgs []byte
	for _, kv := range e {
		k, v, _ := strings.Cut(kv, "=")
		envArgs = append(append(append(envArgs, "--setenv\x00"...), k+"\x00"...), v+"\x00"...)
	}
	envFd, err := fds.data(envArgs)
	if err != nil {
		return fail(fmt.Errorf("environment: %w", err))
	}
	args := bwrapArgs(boxLayout{
		mounts: s.mounts, etc: etc, info: infoFd, seccomp: seccompFd, workspace: s.cfg.Workspace, binds: binds,
		tmpBytes: lim.TmpBytes, envFd: envFd,
	}, dir, e, inner)
	argv := append([]string{"/bin/sh", "-c", gateScript(gateFd, nsFd, lim.FileBytes), s.cfg.Bwrap}, args...)
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if network != nil {
		enter := network.enter(nsFd)
		if s.cfg.HostUID != 0 {
			enter = append(enter, "--setuid", strconv.Itoa(int(s.cfg.HostUID)), "--setgid", strconv.Itoa(int(s.cfg.HostGID)))
		}
		argv = append(append(enter, "--"), argv...)
	} else if s.cfg.HostUID != 0 {
		attr.Credential = &syscall.Credential{Uid: s.cfg.HostUID, Gid: s.cfg.HostGID, Groups: []uint32{}}
	}
	c.Cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir = "/"
	// The programs before the boundary (nsenter as root, the gate, bwrap) see neither the runner's
	// environment nor the tenant's: a tenant's LD_PRELOAD or similar would run its code outside the sandbox.
	// The command's environment travels as --setenv after --clearenv.
	c.Env = []string{"PATH=" + DefaultPATH}
	c.ExtraFiles = fds.passed
	c.SysProcAttr = attr
	c.Cancel = c.kill
	c.WaitDelay = waitDelay
	c.fds = fds
	c.infoR, c.infoW = infoR, infoW
	c.gateW = gateW
	c.cgroup = s.cfg.Cgroup
	c.init = &sandboxInit{known: make(chan struct{}), pidfd: -1}
	return c, nil
}

// gateScript blocks on fd until boxCmd.start writes a line, then closes it and nsFd, lowers RLIMIT_FSIZE to
// fileBytes (rounded down to the shell's 512-byte blocks; 0: unchanged) and executes "$0" "$@" (bwrap and
// its arguments). A failed read (the runner gave up) exits without running anything. The limit is set by
// the shell for itself because lowering another uid's limits (prlimit) needs CAP_SYS_RESOURCE, which a
// runner's root may not have.
func gateScript(fd, nsFd int, fileBytes int64) string {
	n := strconv.Itoa(fd)
	// No core dumps: on hosts whose core_pattern is a pipe, a crash would run a root helper.
	s := "read -r _ <&" + n + " || exit 125; exec " + n + "<&-; ulimit -H -c 0 || exit 125; "
	if nsFd > 0 { // nsenter's way into the network namespace; the sandbox has no use for it
		s += "exec " + strconv.Itoa(nsFd) + "<&-; "
	}
	if fileBytes > 0 {
		s += "ulimit -f " + strconv.FormatInt(max(fileBytes/512, 1), 10) + " || exit 125; "
	}
	return s + "exec \"$0\" \"$@\""
}

// fdSet collects the files a bubblewrap command inherits (ExtraFiles: the first is fd 3) and the
// runner's own ends to close after the start.
type fdSet struct {
	passed []*os.File // the child's, in fd order from 3
	own    []*os.File // every file opened here
	lent   []*os.File // passed but owned elsewhere (kept open)
}

func (f *fdSet) pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err == nil {
		f.own = append(f.own, r, w)
	}
	return r, w, err
}

// lend hands a file the set does not own to the child (it stays open after the start) and returns its fd
// number there.
func (f *fdSet) lend(file *os.File) int {
	f.lent = append(f.lent, file)
	return f.pass(file)
}

// pass hands file to the child and returns its fd number there.
func (f *fdSet) pass(file *os.File) int {
	f.passed = append(f.passed, file)
	return 2 + len(f.passed)
}

// data returns the child's fd of a memory file that holds b, read from its start.
func (f *fdSet) data(b []byte) (int, error) {
	fd, err := unix.MemfdCreate("warren-sandbox", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("memfd: %w", err)
	}
	file := os.NewFile(uintptr(fd), "memfd")
	f.own = append(f.own, file)
	if _, err := file.Write(b); err != nil {
		return 0, err
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return f.pass(file), nil
}

// closePassed closes the runner's copies of what the child inherited (after the start).
func (f *fdSet) closePassed() {
	for _, file := range f.passed {
		if !slices.Contains(f.lent, file) {
			file.Close()
		}
	}
}

// closeAll closes every file of the set (a command that will not start).
func (f *fdSet) closeAll() {
	for _, file := range f.own {
		file.Close()
	}
}

// Validate checks spec the way Run does, so a caller can refuse a request before committing to an answer.
// Failures are invalid_argument *wire.Error values wrapping ErrInvalidSpec.
func Validate(spec Spec) error {
	bad := func(msg string) error { return wire.Wrap(wire.InvalidArgument, ErrInvalidSpec, msg) }
	switch {
	case spec.Command == "":
		return bad("command is required")
	case strings.IndexByte(spec.Command, 0) >= 0:
		return bad("command contains a NUL byte")
	case spec.Timeout <= 0:
		return fmt.Errorf("%w: timeout must be positive", ErrInvalidSpec)
	case spec.Dir != "" && spec.Dir != "." && !filepath.IsLocal(spec.Dir):
		return bad("working directory must be inside the workspace")
	}
	for _, a := range spec.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("an argument contains a NUL byte")
		}
	}
	return ValidateEnv(spec.Env)
}

// drain copies r to w until EOF; once w fails the rest is discarded so the command is not blocked.
func drain(w io.Writer, r io.Reader) {
	if w == nil {
		w = io.Discard
	}
	if _, err := io.Copy(w, r); err != nil {
		_, _ = io.Copy(io.Discard, r)
	}
}

func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
	return ps.ExitCode()
}
