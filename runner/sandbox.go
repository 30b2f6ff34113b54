package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/session"
)

// Default sandbox limits, for quota fields that are not set (wire.SandboxLimits: 0 means not set).
const (
	DefaultProcesses       = 1024
	DefaultMemoryBytes     = 2 << 30
	DefaultCPUMillis       = 1000
	DefaultTmpBytes        = 1 << 30
	DefaultWorkspaceBytes  = 10 << 30
	DefaultConcurrentExecs = 8
)

// sandboxParts are what a sandbox holds on the host besides its workspace: its host uid, its control
// group and its network. Released when the runner ends.
type sandboxParts struct {
	uid     *isolate.UIDLease
	netUID  *isolate.UIDLease // the network's own (pasta's), never the sandbox's; nil on veth
	cgroup  *isolate.Cgroup
	network *isolate.Network
}

func (p *sandboxParts) release() {
	if p.network != nil {
		p.network.Close()
	}
	if p.cgroup != nil {
		_ = p.cgroup.Close()
	}
	p.uid.Release()
	p.netUID.Release()
}

// effectiveLimits fills the limits a grant does not set with the runner's defaults; -1 (unlimited) becomes
// 0 (no limit) for the isolate package.
func effectiveLimits(g *wire.SandboxLimits) (isolate.Limits, int64) {
	var l wire.SandboxLimits
	if g != nil {
		l = *g
	}
	pick := func(v, def int64) int64 {
		switch {
		case v < 0:
			return 0
		case v == 0:
			return def
		}
		return v
	}
	ws := pick(l.WorkspaceBytes, DefaultWorkspaceBytes)
	return isolate.Limits{
		Processes:   pick(l.Processes, DefaultProcesses),
		MemoryBytes: pick(l.MemoryBytes, DefaultMemoryBytes),
		CPUMillis:   pick(l.CPUMillis, DefaultCPUMillis),
		TmpBytes:    pick(l.TmpBytes, DefaultTmpBytes),
		FileBytes:   ws,
	}, pick(l.ConcurrentExecs, DefaultConcurrentExecs)
}

// buildSandbox makes the sandbox of New: under bubblewrap with a root runner a host uid of its own (which
// then owns the workspace and the agent's home) and a control group with the default limits; the network
// is attached in Run, once the model proxy's port is known.
func (r *Runner) buildSandbox() error {
	cfg := isolate.Config{
		Workspace: r.cfg.Workspace, Bwrap: r.cfg.BwrapPath, Insecure: r.cfg.Insecure, Now: r.cfg.Now,
		HostNetwork: r.cfg.HostNetwork,
	}
	lim, execs := effectiveLimits(nil)
	cfg.Limits = lim
	r.execLimit.Store(execs)
	r.workspaceLimit.Store(lim.FileBytes)
	r.disk = &diskGuard{dir: r.cfg.Workspace, limit: r.workspaceLimit.Load}
	parts := &sandboxParts{}
	if !r.cfg.Insecure {
		if os.Geteuid() == 0 {
			lease, err := isolate.AllocateUID(r.cfg.UIDDir, r.cfg.Issuer+"/"+r.cfg.User)
			if err != nil {
				return err
			}
			parts.uid = lease
			cfg.HostUID, cfg.HostGID = lease.UID, lease.UID
			dirs := []string{r.cfg.Workspace}
			if r.cfg.Model != nil {
				dirs = append(dirs, r.cfg.Model.Home)
			}
			for _, d := range dirs {
				if err := os.MkdirAll(d, 0o700); err != nil {
					parts.release()
					return fmt.Errorf("sandbox dir: %w", err)
				}
				if err := isolate.Chown(d, int(lease.UID), int(lease.UID)); err != nil {
					parts.release()
					return fmt.Errorf("give %s to the sandbox: %w", d, err)
				}
			}
			if r.cfg.CgroupParent != "" {
				name := "sandbox-" + strconv.FormatUint(uint64(lease.UID), 10) + "-" + strconv.Itoa(os.Getpid())
				cg, err := isolate.NewCgroup(r.cfg.CgroupParent, name, lim)
				if err != nil {
					parts.release()
					return err
				}
				parts.cgroup = cg
				cfg.Cgroup = cg
			}
		} else if !r.cfg.HostNetwork {
			return fmt.Errorf("%w: a sandbox network of its own needs the runner to run as root; run it as root or choose -sandbox-network=host (every host listener on loopback is then reachable from the sandbox)", ErrConfig)
		}
	}
	sb, err := isolate.New(cfg)
	if err != nil {
		parts.release()
		return fmt.Errorf("sandbox: %w", err)
	}
	r.sandbox, r.parts = sb, parts
	r.disk.mu.Lock()
	r.disk.pids = sb.Pids
	r.disk.mu.Unlock()
	return nil
}

// giveFiles gives the workspace and the agent's home (restored as root) to the sandbox's host uid.
func (r *Runner) giveFiles() error {
	if r.parts.uid == nil {
		return nil
	}
	dirs := []string{r.cfg.Workspace}
	if r.cfg.Model != nil {
		dirs = append(dirs, r.cfg.Model.Home)
	}
	for _, d := range dirs {
		if err := isolate.Chown(d, int(r.parts.uid.UID), int(r.parts.uid.UID)); err != nil {
			return fmt.Errorf("give %s to the sandbox: %w", d, err)
		}
	}
	return nil
}

// attachNetwork makes the sandbox's network once the model proxy listens at proxyURL (its port is the one
// port of the host's loopback the sandbox reaches).
func (r *Runner) attachNetwork(proxyURL string) error {
	if r.cfg.Insecure || r.cfg.HostNetwork {
		return nil
	}
	var fwd []uint16
	if proxyURL != "" {
		u, err := url.Parse(proxyURL)
		if err != nil {
			return fmt.Errorf("model proxy url: %w", err)
		}
		_, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			return fmt.Errorf("model proxy url: %w", err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return fmt.Errorf("model proxy port: %w", err)
		}
		fwd = []uint16{uint16(p)}
	}
	ncfg := isolate.NetworkConfig{
		Stack: r.cfg.NetworkStack, Nsenter: r.cfg.Nsenter, ForwardTCP: fwd, Allow: r.cfg.EgressAllow,
		Pool4: r.cfg.NetPool4, Pool6: r.cfg.NetPool6,
	}
	if r.cfg.NetworkStack == isolate.StackPasta {
		netUID, err := isolate.AllocateUID(r.cfg.UIDDir, "network/"+r.cfg.Issuer+"/"+r.cfg.User)
		if err != nil {
			return err
		}
		r.parts.netUID = netUID
		ncfg.Pasta, ncfg.UID, ncfg.GID, ncfg.Cgroup = r.cfg.Pasta, netUID.UID, netUID.UID, r.parts.cgroup
		ncfg.OnRestart = func(cause error) {
			r.metrics.network.WithLabelValues(networkRestarted).Inc()
			r.log.Warn("sandbox network stack exited; started again", "cause", cause)
		}
	}
	n, err := isolate.NewNetwork(ncfg)
	if err != nil {
		return fmt.Errorf("sandbox network: %w", err)
	}
	r.parts.network = n
	return r.sandbox.SetNetwork(n)
}

// watchNetwork stops the sandbox when its network died for good (isolate.Network.Down; a pasta that exited
// and was started again is only counted, in attachNetwork): running turns and queued prompts fail at once
// with the network's unavailable error, commands are refused with it, and the runner stops, writing its
// snapshot; the next request starts the sandbox again with a fresh network. It returns when ctx ends.
func (r *Runner) watchNetwork(ctx context.Context, hub *session.Hub) {
	n := r.network()
	if n == nil {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-n.Down():
	}
	err := n.Err()
	r.metrics.network.WithLabelValues(networkDown).Inc()
	r.log.Error("sandbox network died: failing its turns and stopping the sandbox", "err", err)
	var we *wire.Error
	if !errors.As(err, &we) {
		we = wire.Errorf(wire.Unavailable, "the sandbox's network died")
	}
	fctx, cancel := context.WithTimeout(ctx, r.cfg.ShutdownTimeout)
	defer cancel()
	if err := hub.Fail(fctx, we); err != nil {
		r.log.Warn("sandbox network died: turns still running", "err", err)
	}
	r.stop(err)
}

// applyLimits makes the limits of a grant the sandbox's (its cgroup's at once, /tmp and file size for the
// next command, concurrent execs for the next request). A failure is logged: the previous limits hold.
func (r *Runner) applyLimits(g *wire.SandboxLimits) {
	lim, execs := effectiveLimits(g)
	r.execLimit.Store(execs)
	r.workspaceLimit.Store(lim.FileBytes)
	if err := r.sandbox.SetLimits(lim); err != nil {
		r.log.Warn("apply sandbox limits", "err", err)
	}
}

// maxSlots bounds the exec slots the semaphore can hand out whatever a quota says.
const maxSlots = 1024

// takeExec takes one of the concurrent-exec slots or refuses with resource_exhausted.
func (r *Runner) takeExec() (release func(), err error) {
	limit := r.execLimit.Load()
	if limit <= 0 || limit > maxSlots {
		limit = maxSlots
	}
	if n := r.execsRunning.Add(1); n > limit {
		r.execsRunning.Add(-1)
		return nil, wire.Errorf(wire.ResourceExhausted, "%d commands are already running in this sandbox (the quota's max_concurrent_execs)", limit)
	}
	return func() { r.execsRunning.Add(-1) }, nil
}
