package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/wire"
)

// ProcessSpec is a long-running program started with Start.
type ProcessSpec struct {
	// Command and Args mean what they mean in Spec: a /bin/sh -c script without Args, otherwise the
	// program (looked up in the sandbox's PATH, or an absolute path inside the sandbox) run with Args.
	Command string
	Args    []string
	// Dir is the working directory relative to the workspace, already confined by the caller.
	Dir string
	// Env is added to the minimal environment and may override it (HOME included).
	Env map[string]string
	// Binds are mounted inside the sandbox in addition to the workspace. They exist only under bubblewrap:
	// in insecure mode nothing is mounted and the caller must pass host paths in Command, Args and Env.
	Binds []Bind
}

// Process is a program running inside the sandbox boundary, talking through pipes. Its whole process tree
// is killed by Kill, by Close, or when the ctx given to Start ends. Methods are safe for concurrent use.
type Process struct {
	// Stdin, Stdout and Stderr are the caller's ends of the process's standard streams. They are plain
	// pipes, so read and write deadlines work. Close closes all three; the caller may close Stdin earlier
	// to signal end of input.
	Stdin  *os.File
	Stdout *os.File
	Stderr *os.File

	cmd     *procState
	box     *boxCmd
	done    chan struct{}
	closeMu sync.Once
}

// procState is the part of *exec.Cmd a Process keeps after Start.
type procState struct {
	pid   int
	state *os.ProcessState
	err   error
}

// treeGone bounds how long a finished process's sandbox may take to disappear after the outer bwrap is
// reaped.
const treeGone = 5 * time.Second

// stat reads the parent and state of pid from /proc/PID/stat ("pid (comm) S ppid ...").
func stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// Start starts spec inside the sandbox (the same boundary as Run: namespaces, read-only system, private
// /tmp, workspace at /workspace, cleared environment, own process group) and returns without waiting.
// Errors are: invalid_argument *wire.Error (wrapping ErrInvalidSpec) for a malformed spec, ErrInvalidSpec
// for a bad bind, or a failure to start.
func (s *Sandbox) Start(ctx context.Context, spec ProcessSpec) (*Process, error) {
	if err := Validate(Spec{Command: spec.Command, Args: spec.Args, Dir: spec.Dir, Env: spec.Env, Timeout: time.Hour}); err != nil {
		return nil, err
	}
	if !s.cfg.Insecure {
		if err := validateBinds(spec.Binds); err != nil {
			return nil, err
		}
	}
	cmd, err := s.command(ctx, cleanDir(spec.Dir), spec.Env, spec.Binds, shellArgv(spec.Command, spec.Args))
	if err != nil {
		return nil, err
	}

	var files []*os.File // every pipe end, for cleanup on failure
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
		cmd.abort()
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.start(); err != nil {
		for _, f := range files {
			f.Close()
		}
		if errors.Is(err, syscall.E2BIG) {
			return nil, wire.Wrap(wire.InvalidArgument, fmt.Errorf("%w: %w", ErrInvalidSpec, err), "command line too long")
		}
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	// The child's ends belong to the child now; keeping ours open would hide its exit from readers.
	inR.Close()
	outW.Close()
	errW.Close()
	return started(cmd, inW, outR, errR), nil
}

// started tracks a started command: the Process is done once it has been reaped and its sandbox is gone.
func started(cmd *boxCmd, stdin, stdout, stderr *os.File) *Process {
	p := &Process{Stdin: stdin, Stdout: stdout, Stderr: stderr, cmd: &procState{pid: cmd.Process.Pid}, box: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.wait()
		cmd.reapStragglers()
		cmd.settle(treeGone)
		p.cmd.state, p.cmd.err = cmd.ProcessState, err
		close(p.done)
	}()
	return p
}

// Pid is the host process id of the process (the outer bwrap under bubblewrap), which is also its
// process group id.
func (p *Process) Pid() int { return p.cmd.pid }

// Done is closed once the process has exited and been reaped, and, when it was killed, once the
// processes of its sandbox are gone too (bounded by a few seconds).
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit or ctx to end. It returns the exit status (128+N for signal N) and a
// nil error once the process has exited, or -1 and the cause of ctx.
func (p *Process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return exitCode(p.cmd.state), nil
	case <-ctx.Done():
		return -1, context.Cause(ctx)
	}
}

// ExitError describes how the process ended ("exit status 1", "signal: killed"); "" while it runs.
func (p *Process) ExitError() string {
	select {
	case <-p.done:
	default:
		return ""
	}
	if p.cmd.state != nil {
		return p.cmd.state.String()
	}
	if p.cmd.err != nil {
		return strings.TrimSpace(p.cmd.err.Error())
	}
	return "exited"
}

// Kill sends SIGKILL to the process's whole group or, under bwrap, to its sandbox's init (which ends its
// PID namespace) and to bwrap. Killing a process that has already exited is not an error.
func (p *Process) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.box.kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill process %d: %w", p.cmd.pid, err)
	}
	return nil
}

// Close kills the process tree, waits for it to be reaped and closes the pipes, which makes pending reads
// and writes on them return. It is idempotent. A caller wanting a graceful end closes Stdin first and
// waits (with Wait) before calling Close.
func (p *Process) Close() error {
	var err error
	p.closeMu.Do(func() {
		err = p.Kill()
		<-p.done
		p.Stdin.Close()
		p.Stdout.Close()
		p.Stderr.Close()
	})
	return err
}

// Signal sends sig to the program the process runs, the way a terminal would: under bubblewrap to the
// process group of the sandbox's first program (the child of its init, which bwrap's --new-session made a
// group leader), in insecure mode to the process group. SIGKILL is Kill: the whole tree. Signalling a
// process that has exited is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill()
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	si := p.box.init
	if si == nil {
		if err := syscall.Kill(-p.cmd.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal process group %d: %w", p.cmd.pid, err)
		}
		return nil
	}
	select {
	case <-si.known:
	case <-time.After(initWait):
	}
	si.mu.Lock() // the pidfd keeps the init from being released (settle) while its child is looked up
	defer si.mu.Unlock()
	if si.pidfd < 0 {
		return nil // gone
	}
	child := childOf(si.pid)
	if child <= 0 {
		return nil // the program has exited; the init follows
	}
	// The pidfd pins the child: once it is checked to be the init's, its pid (and so its group while it
	// leads one) cannot name another process.
	fd, err := unix.PidfdOpen(child, 0)
	if err != nil {
		return nil // gone
	}
	defer unix.Close(fd)
	if ppid, _, ok := stat(child); !ok || ppid != si.pid {
		return nil
	}
	if pgid, perr := unix.Getpgid(child); perr == nil && pgid == child {
		err = syscall.Kill(-child, sig)
	} else {
		err = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", child, err)
	}
	return nil
}

// childOf returns a child of pid (the sandbox's init has one: the program it runs), 0 if none.
func childOf(pid int) int {
	p := strconv.Itoa(pid)
	if b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children"); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				return c
			}
		}
		return 0
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := stat(c); ok && ppid == pid {
			return c
		}
	}
	return 0
}

// Listening reports whether a TCP socket (IPv4 or IPv6) listens on port in the process's network
// namespace, which is the sandbox's: what a program inside it reaches at localhost:port.
func (p *Process) Listening(port uint16) bool {
	select {
	case <-p.done:
		return false
	default:
	}
	return listening(p.cmd.pid, []uint16{port})
}
