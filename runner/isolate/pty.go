package isolate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/wire"
)

// Terminal is a program running inside the sandbox boundary on a pseudo-terminal (StartTerminal).
//
// What a terminal changes for isolation: nothing of the boundary. A terminal is built by the same command
// builder as Run and Start (namespaces, seccomp, cgroup, uid, mounts, limits, and bwrap's --new-session),
// with two differences: its standard streams are the slave end of a pseudo-terminal the runner opened, and
// the program inside runs under `setsid --wait --ctty`, which gives it a session of its own inside the
// sandbox whose controlling terminal is that slave end. A terminal needs one (line editing, Ctrl-C turning
// into SIGINT for the foreground job, job control, SIGWINCH on resize).
//
//   - The master end stays in the runner: opened close-on-exec, never passed to a child.
//   - The chain before the boundary (nsenter, the gate, bwrap) has no controlling terminal at all: bwrap's
//     --new-session detaches the sandbox from whatever terminal the runner may have, so TIOCSTI (which
//     works only on the caller's controlling terminal) can reach the runner's own terminal no more than
//     from exec. Injected bytes can only land in the terminal's own input queue, read by the tenant's own
//     shell.
//   - Only the tenant's processes are in the terminal's session: Ctrl-C, Ctrl-Z or a hang-up signal only
//     the foreground job inside the sandbox, never bwrap or the runner (tcsetpgrp accepts only groups of
//     the same session).
type Terminal struct {
	*Process
	// PTY is the master end: reads return what the program writes to its terminal (ReadOutput turns the
	// end into io.EOF), writes are its keyboard input.
	PTY *os.File
}

// StartTerminal starts spec inside the sandbox (the boundary of Start) with a new pseudo-terminal of cols
// by rows as its standard streams and controlling terminal, and returns without waiting. Binds are not
// supported (nil). Errors are those of Start, and invalid_argument for a size out of bounds. The program
// runs under util-linux's setsid (found in the sandbox's PATH, which shows the host's /usr): its exit
// status is the program's, or 1 with a message when a signal ended it.
func (s *Sandbox) StartTerminal(ctx context.Context, spec ProcessSpec, cols, rows int) (*Terminal, error) {
	if err := Validate(Spec{Command: spec.Command, Args: spec.Args, Dir: spec.Dir, Env: spec.Env, Timeout: time.Hour}); err != nil {
		return nil, err
	}
	if err := wire.CheckTermSize(cols, rows); err != nil {
		return nil, err
	}
	if spec.Binds != nil {
		return nil, fmt.Errorf("%w: a terminal takes no binds", ErrInvalidSpec)
	}
	inner := append([]string{"setsid", "--wait", "--ctty"}, shellArgv(spec.Command, spec.Args)...)
	cmd, err := s.command(ctx, cleanDir(spec.Dir), spec.Env, nil, inner)
	if err != nil {
		return nil, err
	}
	master, slave, err := pty.Open()
	if err != nil {
		cmd.abort()
		return nil, fmt.Errorf("open pseudo-terminal: %w", err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		cmd.abort()
		master.Close()
		slave.Close()
		return nil, fmt.Errorf("size pseudo-terminal: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	err = cmd.start()
	// The child's copies of the slave end are what keep the terminal open; ours would hide its end.
	slave.Close()
	if err != nil {
		master.Close()
		if errors.Is(err, syscall.E2BIG) {
			return nil, wire.Wrap(wire.InvalidArgument, fmt.Errorf("%w: %w", ErrInvalidSpec, err), "command line too long")
		}
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return &Terminal{Process: started(cmd, nil, nil, nil), PTY: master}, nil
}

// Resize sets the terminal's size; the kernel sends SIGWINCH to its foreground process group.
func (t *Terminal) Resize(cols, rows int) error {
	if err := wire.CheckTermSize(cols, rows); err != nil {
		return err
	}
	if err := pty.Setsize(t.PTY, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}

// ReadOutput reads what the program wrote to its terminal. The end of the terminal (every slave end
// closed: EIO on Linux) is io.EOF.
func (t *Terminal) ReadOutput(b []byte) (int, error) {
	n, err := t.PTY.Read(b)
	if err != nil && errors.Is(err, syscall.EIO) {
		err = io.EOF
	}
	return n, err
}

// Kill is Process.Kill. In insecure mode the program's session (made by setsid, so outside the started
// process's group) and the terminal's foreground group are killed too; descendants that left both survive,
// as insecure mode allows.
func (t *Terminal) Kill() error {
	if t.box.init == nil {
		fd := int(t.PTY.Fd())
		for _, req := range []uint{unix.TIOCGSID, unix.TIOCGPGRP} {
			if g, err := unix.IoctlGetInt(fd, req); err == nil && g > 1 {
				_ = syscall.Kill(-g, syscall.SIGKILL)
			}
		}
	}
	return t.Process.Kill()
}

// Close kills the program's tree, waits for it and closes the master end. It is idempotent.
func (t *Terminal) Close() error {
	select {
	case <-t.Done():
	default:
		_ = t.Kill()
	}
	err := t.Process.Close()
	t.PTY.Close()
	return err
}
