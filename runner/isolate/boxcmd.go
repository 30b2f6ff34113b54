package isolate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// initWait bounds how long a kill waits for bubblewrap to report its sandbox's init. bwrap reports it
// right after cloning it, before any setup that a sandboxed program could stall.
const initWait = 2 * time.Second

// boxCmd is a command inside the boundary. Under bubblewrap it also knows the sandbox's init (PID 1 of
// its namespace) from bwrap's --info-fd, and a kill goes to that init as well as to the outer bwrap's
// process group. Killing the init takes the whole namespace down at once. Killing only the outer bwrap is
// not enough: --die-with-parent is set by the child after the clone, so a kill landing in between leaves
// the sandbox running with no parent (seen about once in fifty immediate cancels).
type boxCmd struct {
	*exec.Cmd
	init   *sandboxInit // nil in insecure mode
	infoR  *os.File
	infoW  *os.File
	fds    *fdSet   // what the child inherits (bubblewrap only)
	gateW  *os.File // opens the gate (see Sandbox.command)
	cgroup *Cgroup  // nil: none
}

// sandboxInit holds a pidfd of the sandbox's init once bwrap has reported it. The pidfd pins the process,
// so neither a kill nor a wait can reach an unrelated process that reused the pid.
type sandboxInit struct {
	known chan struct{} // closed once pidfd is set, or bwrap closed its info pipe without a usable report
	mu    sync.Mutex
	pidfd int // -1: unknown or released
	pid   int // the init's host pid while pidfd is set
}

// checkPidfd tells whether this kernel lets the runner use pidfds (pidfd_open, Linux ≥ 5.3, not denied by
// a seccomp profile), which kill and settle need under bubblewrap.
func checkPidfd() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open (Linux 5.3 or later, allowed by the seccomp profile): %w", err)
	}
	unix.Close(fd)
	return nil
}

// start starts the command and, under bubblewrap, puts it into the sandbox's cgroup while it waits at the
// gate, opens the gate, and begins reading bwrap's report.
func (c *boxCmd) start() error {
	err := c.Start()
	if c.fds != nil {
		c.fds.closePassed() // the child's copies matter; ours would hide bwrap's exit
	}
	if err != nil {
		if c.init != nil {
			c.infoR.Close()
			c.gateW.Close()
			close(c.init.known)
		}
		return err
	}
	if c.init == nil {
		return nil
	}
	if err := c.limit(); err != nil {
		c.gateW.Close() // the gate fails: nothing runs
		_ = c.Process.Kill()
		_ = c.Wait()
		c.infoR.Close()
		close(c.init.known)
		return err
	}
	_, err = c.gateW.Write([]byte("\n"))
	c.gateW.Close()
	go c.init.read(c.infoR, c.Process.Pid)
	if err != nil {
		return nil // the process is gone already; wait reports how it ended
	}
	return nil
}

// limit puts the gated process into the sandbox's cgroup; what it starts inherits it.
func (c *boxCmd) limit() error {
	if c.cgroup != nil {
		if err := c.cgroup.add(c.Process.Pid); err != nil {
			return fmt.Errorf("sandbox cgroup: %w", err)
		}
	}
	return nil
}

// read decodes bwrap's {"child-pid": N, ...} report and opens a pidfd on N, keeping it only if N is
// still bwrap's child (bwrap itself is not reaped before known is closed, see wait).
func (si *sandboxInit) read(r *os.File, bwrapPid int) {
	defer close(si.known)
	defer r.Close()
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 64<<10)).Decode(&info); err != nil || info.ChildPid <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(info.ChildPid, 0)
	if err != nil {
		return // already gone and reaped
	}
	if ppid, _, ok := stat(info.ChildPid); !ok || ppid != bwrapPid {
		unix.Close(fd)
		return
	}
	si.mu.Lock()
	si.pidfd, si.pid = fd, info.ChildPid
	si.mu.Unlock()
}

// kill sends SIGKILL to the sandbox's init (when bwrap reports it within initWait) and then to bwrap
// itself, both through pidfds so that neither can reach a process that reused the pid. Without bubblewrap
// it kills the process group, reaching every descendant that did not leave it.
func (c *boxCmd) kill() error {
	si := c.init
	if si == nil {
		return killGroup(c.Process.Pid)
	}
	select {
	case <-si.known:
	case <-time.After(initWait):
	}
	si.mu.Lock()
	if si.pidfd >= 0 {
		_ = unix.PidfdSendSignal(si.pidfd, unix.SIGKILL, nil, 0)
	}
	si.mu.Unlock()
	// The outer bwrap is alone in its group (the sandbox calls setsid), so killing it is enough.
	return c.Process.Kill()
}

// abort releases what command prepared for a command that will not be started.
func (c *boxCmd) abort() {
	if c.fds != nil {
		c.fds.closeAll()
	}
}

// reapStragglers kills what is left of the process group after the command exited: in insecure mode, the
// descendants that did not leave it. Under bubblewrap there is nothing to do (they died with the sandbox's
// init), and the group id may already be free.
func (c *boxCmd) reapStragglers() {
	if c.init == nil {
		_ = killGroup(c.Process.Pid)
	}
}

// wait waits for the command. Under bubblewrap it first waits for the report to be read (bwrap closes
// the pipe when it exits at the latest), so bwrap's pid stays reserved while read checks its child.
func (c *boxCmd) wait() error {
	if c.init != nil {
		<-c.init.known
	}
	return c.Wait()
}

// settle waits, up to d, until the sandbox's init has exited, which the kernel allows only once every
// other process of its namespace is gone; then nothing of the sandbox still writes to its mounts. It
// releases the pidfd. Without bubblewrap there is nothing to wait for.
func (c *boxCmd) settle(d time.Duration) {
	si := c.init
	if si == nil {
		return
	}
	si.mu.Lock()
	fd := si.pidfd
	si.mu.Unlock()
	if fd >= 0 {
		deadline := time.Now().Add(d)
		for {
			ms := int(time.Until(deadline) / time.Millisecond)
			if ms <= 0 {
				break
			}
			if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms); errors.Is(err, syscall.EINTR) {
				continue
			}
			break
		}
	}
	si.mu.Lock()
	if si.pidfd >= 0 {
		unix.Close(si.pidfd)
		si.pidfd = -1
	}
	si.mu.Unlock()
}
