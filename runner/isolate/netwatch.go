package isolate

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// maxPastaRestarts bounds how often a network starts pasta again after it exited: pasta runs as a uid and
// in a cgroup of its own, so the sandbox can neither kill it nor starve it of memory, and one that keeps
// exiting is a fault of the host's that a restart of the sandbox (a fresh namespace) handles better.
const maxPastaRestarts = 5

// pastaReady bounds how long pasta may take to configure the namespace.
const pastaReady = 10 * time.Second

// Down is closed when the network died for good (Err says why): pasta exited and could not be started
// again, or the namespace's holder exited. Close does not close it.
func (n *Network) Down() <-chan struct{} { return n.down }

// Err is nil while the network works; once it is down, an unavailable *wire.Error wrapping ErrNetworkDown
// and the cause.
func (n *Network) Err() error {
	select {
	case <-n.down:
		return n.downErr
	default:
		return nil
	}
}

// supervise waits for pasta or the holder to exit (it is their parent: it learns of it at once), starts
// pasta again when it exited, and marks the network down when that fails or the holder exited. It ends
// with Close.
func (n *Network) supervise() {
	defer n.watch.Done()
	for restarts := 0; ; restarts++ {
		n.mu.Lock()
		pasta, exit := n.pasta, n.pastaExit
		n.mu.Unlock()
		select {
		case <-n.closing:
			return
		case <-n.holderExit:
			n.fail(errors.New("the namespace's holder exited"))
			return
		case <-exit:
		}
		select {
		case <-n.closing: // Close killed it
			return
		default:
		}
		cause := fmt.Errorf("pasta exited (%s)", pasta.ProcessState)
		if restarts == maxPastaRestarts {
			n.fail(fmt.Errorf("%w after %d restarts", cause, restarts))
			return
		}
		cmd, next, err := n.startPasta()
		if err != nil {
			n.fail(fmt.Errorf("%w; starting it again: %w", cause, err))
			return
		}
		n.mu.Lock()
		n.pasta, n.pastaExit = cmd, next
		n.mu.Unlock()
		if n.cfg.OnRestart != nil {
			n.cfg.OnRestart(cause)
		}
	}
}

// fail marks the network down for cause.
func (n *Network) fail(cause error) {
	n.downErr = wire.Wrap(wire.Unavailable, fmt.Errorf("%w: %w", ErrNetworkDown, cause),
		"the sandbox's network died (its network stack exited)")
	close(n.down)
}

// startPasta starts pasta on the namespace (in the network's part of the cgroup) and waits until it has
// configured it; the channel is closed once that pasta has exited. On failure nothing is left running.
//
// No inbound forwards (-t/-u none: nothing the sandbox listens on is published on the host), the host's
// loopback only at the forwarded ports (-T), no UDP to it (-U none), and the gateway address is not the
// host (--no-map-gw). pasta finds the namespace through the holder's pid: the holder is alive (the caller
// checked), and only this network's processes run as its uid, so a pid used again is never another
// namespace pasta could join.
func (n *Network) startPasta() (*exec.Cmd, chan struct{}, error) {
	tcpNS := "none"
	if len(n.cfg.ForwardTCP) > 0 {
		ports := make([]string, len(n.cfg.ForwardTCP))
		for i, p := range n.cfg.ForwardTCP {
			ports[i] = strconv.Itoa(int(p))
		}
		tcpNS = strings.Join(ports, ",")
	}
	pid := strconv.Itoa(n.holder.Process.Pid)
	cmd := exec.Command(n.cfg.Pasta, "--foreground", "--quiet", "--config-net", "--no-map-gw",
		"-t", "none", "-u", "none", "-T", tcpNS, "-U", "none", "--dns-forward", DNSForward, pid)
	cmd.Env = []string{"PATH=" + DefaultPATH}
	cred := &syscall.Credential{Uid: n.cfg.UID, Gid: n.cfg.GID, Groups: []uint32{}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4 << 10}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("%w: start pasta: %w", ErrConfig, err)
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	stop := func(err error) (*exec.Cmd, chan struct{}, error) {
		_ = cmd.Process.Kill()
		<-exit
		return nil, nil, err
	}
	if n.cfg.Cgroup != nil {
		if err := n.cfg.Cgroup.addNetwork(cmd.Process.Pid); err != nil {
			return stop(fmt.Errorf("%w: pasta cgroup: %w", ErrConfig, err))
		}
	}
	// pasta configures the namespace's interface and routes and binds the forwarded ports inside it, in
	// an order of its own; commands start once the default route is there and every forwarded port
	// listens (before that, the sandbox's first connection to the model proxy may be refused).
	deadline := time.Now().Add(pastaReady)
	for !hasDefaultRoute(n.holder.Process.Pid) || !listening(n.holder.Process.Pid, n.cfg.ForwardTCP) {
		select {
		case <-exit:
			return nil, nil, fmt.Errorf("%w: pasta exited: %s", ErrConfig, strings.TrimSpace(stderr.String()))
		case <-n.holderExit:
			return stop(fmt.Errorf("%w: the namespace's holder exited", ErrConfig))
		case <-n.closing:
			return stop(fmt.Errorf("%w: network closed", ErrConfig))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return stop(fmt.Errorf("%w: pasta did not configure the sandbox network within %s", ErrConfig, pastaReady))
		}
	}
	return cmd, exit, nil
}
