package testenv

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// This file starts Nomad (the Driver port's production scheduler, docs/ARCHITECTURE.md#ports-and-adapters) as `nomad agent -dev`: the
// binary `make tools` builds (Nomad 1.6.1), one agent that is both server and client, bound to 127.0.0.1
// with free HTTP, RPC and Serf ports, its client fingerprinting the loopback interface
// (-network-interface=lo), so a task's NOMAD_IP_* is 127.0.0.1 and what it listens on is reachable from the
// test. The raw_exec driver is on; tasks run as root, like the test. The agent's configuration file:
//
//   - client.options "fingerprint.denylist": the cloud fingerprinters (AWS, GCE, Azure, DigitalOcean) would
//     each probe a metadata address that is not there; "driver.denylist": docker (no daemon here: it logs an
//     error on every fingerprint), qemu and java are not loaded.
//   - client.max_kill_timeout is 2m: Nomad caps a task's kill_timeout at this client setting (default 30s),
//     and sandboxes ask for more (the runner's graceful stop plus its final snapshot). Production clients need
//     the same.
//   - raw_exec: enabled, nothing else. Its no_cgroups option is gone (no effect from Nomad 1.7, an error
//     from 1.8, hashicorp/nomad#19598 and #19599), so raw_exec tasks get cgroups: on Nomad 1.6 with
//     cgroups v1 (this machine: a container, root, a nested memory cgroup, no systemd) a freezer cgroup
//     /sys/fs/cgroup/freezer/nomad/<uuid> per task, which Nomad removes when the task ends, and through which
//     it stops the whole process tree. Nomad 1.6 also sets up its cpuset manager under
//     /sys/fs/cgroup/cpuset/nomad; the exec driver is healthy too (but builds a chroot of several GB per
//     task, 13 s here). client.cgroup_parent stays at its default.
//   - consul: pointed at NomadOptions.ConsulAddr when given (the node's Consul fingerprint, service
//     registration). Nomad 1.6 has no switch that turns its Consul client off; without ConsulAddr it is
//     pointed at a closed loopback port with every automatic use (auto-advertise, auto-join) off.
//   - vault: off, unless NomadOptions.VaultAddr and VaultToken are given (then server and client use that
//     Vault, e.g. a dev server with its root token, so jobs with vault blocks can be planned).
//   - region: NomadOptions.Region, Nomad's "global" by default. Agents of different regions federate with
//     Join (their servers gossip over Serf on loopback), after which a request naming another region, or a
//     job whose region is another, is forwarded there.
//
// Lifecycle. A dev agent is ready (node registered, raw_exec healthy) in a few seconds, so every StartNomad
// is an agent of its own, stopped in t.Cleanup; tests that share one use distinct job names. The agent is a
// child of the test binary with a parent-death signal. Its data directory is a temporary directory of its
// own: as root, Nomad mounts a small tmpfs for every task's secrets directory, so removing the directory
// first unmounts what is still mounted under it. A dev agent destroys its allocations when it shuts down
// gracefully; when the test binary is killed instead, the task processes outlive it (Nomad's executors are
// separate processes by design) until they exit by themselves, and the next StartNomad removes the
// directory left behind.

// NomadOptions configures StartNomad.
type NomadOptions struct {
	Region     string // the agent's Nomad region; empty: Nomad's default, "global"
	ConsulAddr string // host:port of a Consul agent for Nomad's Consul integration; empty: none
	VaultAddr  string // Vault URL for Nomad's Vault integration (with VaultToken); empty: off
	VaultToken string // a token Nomad's servers derive task tokens from (a dev server's root token)
	Datacenter string // the agent's (and its client node's) datacenter; empty: Nomad's default, "dc1"
}

// NomadServer is a Nomad dev agent that a test owns. Methods may be called from one goroutine at a time.
type NomadServer struct {
	bin   string
	dir   string // temporary directory: config, data
	opts  NomadOptions
	ports nomadPorts
	proc  proc
	node  string // the client's node id once ready
}

type nomadPorts struct{ http, rpc, serf int }

// StartNomad starts a Nomad dev agent for t alone, waits until its client node is ready and eligible with a
// healthy raw_exec driver (and, with the options, has fingerprinted Consul and Vault), and stops it when t
// ends. Skips under -short; fails when the nomad binary is missing (run `make tools`).
func StartNomad(t testing.TB, opts NomadOptions) *NomadServer {
	t.Helper()
	bin := Binary(t, "nomad")
	s, err := startNomad(bin, opts)
	if err != nil {
		t.Fatalf("start Nomad: %v", err)
	}
	s.proc.stopAtCleanup(t, func() error { return removeNomadDir(s.dir) })
	return s
}

// Addr is the agent's HTTP address, http://127.0.0.1:port, as nomad/api.Config.Address and NOMAD_ADDR want
// it.
func (s *NomadServer) Addr() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports.http))
}

// SerfAddr is the agent's Serf (gossip) address, 127.0.0.1:port, which other servers join.
func (s *NomadServer) SerfAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports.serf))
}

// Join federates the agent's server with other's (`nomad server join`): agents of different regions become
// one federation, whose servers forward requests naming another region there. It returns once each lists
// the other's region.
func (s *NomadServer) Join(t testing.TB, other *NomadServer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, s.Addr()+"/v1/agent/join?address="+url.QueryEscape(other.SerfAddr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("nomad server join: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("nomad server join: %s: %s", resp.Status, body)
	}
	for _, pair := range [][2]*NomadServer{{s, other}, {other, s}} {
		a, b := pair[0], pair[1]
		err := a.proc.poll(60*time.Second, 100*time.Millisecond, func() error {
			var regions []string
			if err := getJSON(a.Addr()+"/v1/regions", &regions); err != nil {
				return err
			}
			if !slices.Contains(regions, b.region()) {
				return fmt.Errorf("regions %v lack %s", regions, b.region())
			}
			return nil
		})
		if err != nil {
			t.Fatalf("nomad federation %s and %s: %v", a.region(), b.region(), err)
		}
	}
}

// region is the agent's Nomad region.
func (s *NomadServer) region() string {
	if s.opts.Region == "" {
		return "global"
	}
	return s.opts.Region
}

// DataDir is the agent's temporary directory (configuration and data), removed when its test ends.
func (s *NomadServer) DataDir() string { return s.dir }

// NodeID is the id of the agent's client node.
func (s *NomadServer) NodeID() string { return s.node }

// Running reports whether the agent process is up.
func (s *NomadServer) Running() bool { return s.proc.running() }

// Stop shuts the agent down (its allocations are destroyed first); clients get connection errors
// afterwards. A dev agent keeps nothing across a stop, so there is no Start.
func (s *NomadServer) Stop(t testing.TB) {
	t.Helper()
	s.proc.stopOrFatal(t)
}

// Kill kills the agent (SIGKILL), as a crashed machine would end it: unlike Stop, its allocations are not
// stopped, and the task processes go on running (Nomad's executors and log collectors are separate
// processes, and outlive their agent) until t ends, when they are killed with everything below them. A dev
// agent keeps nothing across a kill, so there is no Start.
func (s *NomadServer) Kill(t testing.TB) {
	t.Helper()
	if !s.proc.running() {
		return
	}
	plugins := children(s.proc.cmd.Process.Pid)
	s.proc.kill()
	t.Cleanup(func() {
		for _, p := range plugins {
			killTree(p)
		}
	})
}

// Datacenter is the agent's (and its client node's) datacenter.
func (s *NomadServer) Datacenter() string { return cmp.Or(s.opts.Datacenter, "dc1") }

// Output is the tail of the agent's log (warnings and errors), for test failure messages.
func (s *NomadServer) Output() string { return s.proc.logTail() }

const (
	nomadStalePrefix = "warren-nomad-"
	nomadConfigFile  = "agent.hcl"
	nomadDataDir     = "data"
)

func startNomad(bin string, opts NomadOptions) (*NomadServer, error) {
	dir, err := ownedTempDir(nomadStalePrefix, removeNomadDir)
	if err != nil {
		return nil, err
	}
	s := &NomadServer{
		bin:  bin,
		dir:  dir,
		opts: opts,
		// SIGINT: a dev agent destroys its allocations, then leaves.
		proc: proc{title: "Nomad", stopSig: syscall.SIGINT, grace: 60 * time.Second},
	}
	err = withFreePorts(3, func(p []int) error {
		s.ports = nomadPorts{http: p[0], rpc: p[1], serf: p[2]}
		return s.start()
	})
	if err != nil {
		removeNomadDir(dir)
		return nil, err
	}
	return s, nil
}

// config is the agent's configuration file (see the file comment for why each setting is there).
func (s *NomadServer) config() string {
	consul := `consul {
  address          = "127.0.0.1:1"
  auto_advertise   = false
  server_auto_join = false
  client_auto_join = false
}`
	if s.opts.ConsulAddr != "" {
		consul = fmt.Sprintf(`consul {
  address          = %q
  server_auto_join = false
  client_auto_join = false
}`, s.opts.ConsulAddr)
	}
	vault := `vault {
  enabled = false
}`
	if s.opts.VaultAddr != "" {
		vault = fmt.Sprintf(`vault {
  enabled               = true
  address               = %q
  token                 = %q
  allow_unauthenticated = true
}`, s.opts.VaultAddr, s.opts.VaultToken)
	}
	return fmt.Sprintf(`data_dir             = %q
region               = %q
datacenter           = %q
bind_addr            = "127.0.0.1"
log_level            = "WARN"
disable_update_check = true

ports {
  http = %d
  rpc  = %d
  serf = %d
}

advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}

client {
  enabled           = true
  network_interface = "lo"
  max_kill_timeout  = "2m"
  gc_interval       = "1m"
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
    "driver.denylist"      = "docker,qemu,java"
  }
}

plugin "raw_exec" {
  config {
    enabled = true
  }
}

%s

%s
`, filepath.Join(s.dir, nomadDataDir), s.region(), s.Datacenter(), s.ports.http, s.ports.rpc, s.ports.serf, consul, vault)
}

// start runs the dev agent as a child of the test binary and waits until it is ready.
func (s *NomadServer) start() error {
	if err := os.WriteFile(filepath.Join(s.dir, nomadConfigFile), []byte(s.config()), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "agent", "-dev",
		"-config="+filepath.Join(s.dir, nomadConfigFile),
		"-network-interface=lo",
	)
	// No NOMAD_*, CONSUL_* or VAULT_* variables of the caller's environment reach the agent (or its tasks,
	// which raw_exec starts with the agent's environment).
	cmd.Env = []string{"HOME=" + s.dir, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TZ=UTC"}
	cmd.Dir = s.dir
	if err := s.proc.start(cmd); err != nil {
		return err
	}
	if err := s.proc.awaitReady(90*time.Second, 50*time.Millisecond, s.ready); err != nil {
		return fmt.Errorf("nomad on port %d: %w", s.ports.http, err)
	}
	return nil
}

// ready reports whether the agent's client node is ready, eligible and has a healthy raw_exec driver (and
// the Consul and Vault fingerprints asked for).
func (s *NomadServer) ready() error {
	var nodes []struct {
		ID, Status, SchedulingEligibility string
	}
	if err := getJSON(s.Addr()+"/v1/nodes", &nodes); err != nil {
		return err
	}
	if len(nodes) != 1 {
		return fmt.Errorf("%d nodes registered, want 1", len(nodes))
	}
	if nodes[0].Status != "ready" || nodes[0].SchedulingEligibility != "eligible" {
		return fmt.Errorf("node %s is %s/%s", nodes[0].ID, nodes[0].Status, nodes[0].SchedulingEligibility)
	}
	var node struct {
		Attributes map[string]string
		Drivers    map[string]struct {
			Detected, Healthy bool
			HealthDescription string
		}
	}
	if err := getJSON(s.Addr()+"/v1/node/"+nodes[0].ID, &node); err != nil {
		return err
	}
	if d := node.Drivers["raw_exec"]; !d.Detected || !d.Healthy {
		return fmt.Errorf("raw_exec driver not healthy: %s", d.HealthDescription)
	}
	if s.opts.ConsulAddr != "" && node.Attributes["consul.version"] == "" {
		return errors.New("node has not fingerprinted Consul yet")
	}
	if s.opts.VaultAddr != "" && node.Attributes["vault.accessible"] != "true" {
		return errors.New("node has not fingerprinted Vault yet")
	}
	s.node = nodes[0].ID
	return nil
}

// removeNomadDir unmounts what Nomad left mounted under dir (the tmpfs of task secrets directories), then
// removes dir.
func removeNomadDir(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	// Deepest first.
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", mounts[i], err)
		}
	}
	return os.RemoveAll(dir)
}

// mountsUnder lists the mount points below dir, in the order of /proc/self/mountinfo (parents first).
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + "/"
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// The mount point is field 5, with spaces and other special bytes octal-escaped.
		mp := unescapeMountinfo(fields[4])
		if strings.HasPrefix(mp, prefix) {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
