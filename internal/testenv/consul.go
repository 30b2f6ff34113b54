package testenv

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// This file starts Consul (the Registry port's production store, docs/ARCHITECTURE.md#owner-lock) as `consul agent -dev`: the
// binary `make tools` builds, a single server agent that is its own leader, bound to 127.0.0.1 with free
// ports for HTTP, Serf LAN/WAN and server RPC, DNS and gRPC disabled. Two settings differ from a stock dev
// agent: session_ttl_min is 1s (Consul's default minimum is 10s), so tests of session expiry and
// self-fencing take seconds instead of half a minute, and the update check is off (no network here).
// StartConsulACL's agent also has ACLs on, denying by default, with a random management token (which the
// agent uses for itself too).
//
// Lifecycle. A dev agent starts in a second or two, so every StartConsul is a server of its own (no shared
// server and no TestMain hook): tests that share one isolate themselves with a KV prefix of their own. The
// agent is a child of the test binary with a parent-death signal and is stopped in t.Cleanup. It keeps
// everything in memory, so it has no directory to remove; its output is kept in memory, and the tail is
// shown when it fails to start.
//
// A dev agent keeps no state across Stop and Start: Start gives an agent on the same address and ports, with
// the same node name, but an empty catalog, KV store and session table. Tests of recovery register again
// after Start.

// ConsulOptions configures StartConsulWith.
type ConsulOptions struct {
	Datacenter string // the agent's datacenter; empty: Consul's default, dc1
}

// ConsulServer is a Consul dev agent that a test owns. Methods may be called from one goroutine at a time.
type ConsulServer struct {
	bin   string
	node  string
	opts  ConsulOptions
	ports consulPorts
	proc  proc
	token string // with ACLs: the initial management token; "" without
}

type consulPorts struct{ http, serfLAN, serfWAN, server int }

var consulNodes atomic.Int64

// StartConsul starts a Consul dev agent for t alone, waits until it has elected itself leader and registered
// its node, and stops it when t ends. Skips under -short; fails when the consul binary is missing (run
// `make tools`).
func StartConsul(t testing.TB) *ConsulServer {
	t.Helper()
	return startConsul(t, "", ConsulOptions{})
}

// StartConsulACL is StartConsul with ACLs enabled and denying what no token allows (default_policy deny),
// as production runs Consul: ManagementToken may do anything (the agent uses it for itself too), anything
// else needs a token of its own.
func StartConsulACL(t testing.TB) *ConsulServer {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	h := hex.EncodeToString(b[:])
	return startConsul(t, h[:8]+"-"+h[8:12]+"-"+h[12:16]+"-"+h[16:20]+"-"+h[20:], ConsulOptions{})
}

// ManagementToken is the token of StartConsulACL's agent that may do anything; "" without ACLs.
func (s *ConsulServer) ManagementToken() string { return s.token }

// StartConsulWith is StartConsul with options: an agent of its own datacenter, say, to join to another's
// over the WAN (JoinWAN).
func StartConsulWith(t testing.TB, opts ConsulOptions) *ConsulServer {
	t.Helper()
	return startConsul(t, "", opts)
}

func startConsul(t testing.TB, token string, opts ConsulOptions) *ConsulServer {
	t.Helper()
	s := &ConsulServer{
		token: token,
		opts:  opts,
		bin:   Binary(t, "consul"),
		node:  fmt.Sprintf("warren-test-%d-%d", os.Getpid(), consulNodes.Add(1)),
		// SIGINT: the agent leaves and exits.
		proc: proc{title: "Consul", stopSig: syscall.SIGINT, grace: 30 * time.Second},
	}
	// Serf also listens on UDP with the same numbers as on TCP.
	err := withFreePorts(4, func(p []int) error {
		s.ports = consulPorts{http: p[0], serfLAN: p[1], serfWAN: p[2], server: p[3]}
		return s.start()
	})
	if err != nil {
		t.Fatalf("start Consul: %v", err)
	}
	s.proc.stopAtCleanup(t, nil)
	return s
}

// Addr is the agent's HTTP address, 127.0.0.1:port, as consul/api.Config.Address wants it.
func (s *ConsulServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports.http))
}

// Node is the agent's node name, unique within the test binary.
func (s *ConsulServer) Node() string { return s.node }

// Running reports whether the agent process is up.
func (s *ConsulServer) Running() bool { return s.proc.running() }

// Stop shuts the agent down; clients get connection errors until Start. Everything it held (KV, sessions,
// services) is gone for good.
func (s *ConsulServer) Stop(t testing.TB) {
	t.Helper()
	s.proc.stopOrFatal(t)
}

// Kill kills the agent (SIGKILL) as a crashed machine or a partition would end it: it does not leave its
// cluster. Start brings up a new, empty agent on the same ports.
func (s *ConsulServer) Kill(t testing.TB) {
	t.Helper()
	s.proc.kill()
}

// Datacenter is the agent's datacenter.
func (s *ConsulServer) Datacenter() string { return cmp.Or(s.opts.Datacenter, "dc1") }

// WANAddr is the agent's Serf WAN address, 127.0.0.1:port, which servers of other datacenters join.
func (s *ConsulServer) WANAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports.serfWAN))
}

// JoinWAN joins the agent to other's datacenter over the WAN (WAN federation) and waits until each lists
// the other's datacenter.
func (s *ConsulServer) JoinWAN(t testing.TB, other *ConsulServer) {
	t.Helper()
	if err := putJSON("http://"+s.Addr()+"/v1/agent/join/"+other.WANAddr()+"?wan=1", nil); err != nil {
		t.Fatalf("Consul WAN join %s to %s: %v", s.Datacenter(), other.Datacenter(), err)
	}
	for _, c := range []struct{ a, b *ConsulServer }{{s, other}, {other, s}} {
		err := c.a.proc.poll(30*time.Second, 50*time.Millisecond, func() error {
			var dcs []string
			if err := getJSON("http://"+c.a.Addr()+"/v1/catalog/datacenters", &dcs); err != nil {
				return err
			}
			if !slices.Contains(dcs, c.b.Datacenter()) {
				return fmt.Errorf("datacenters %v: no %s yet", dcs, c.b.Datacenter())
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Consul WAN federation of %s and %s: %v", s.Datacenter(), other.Datacenter(), err)
		}
	}
}

// Start starts a stopped agent again on the same ports and waits until it is leader. It is a new, empty dev
// agent (see the file comment).
func (s *ConsulServer) Start(t testing.TB) {
	t.Helper()
	s.proc.restartOrFatal(t, s.start)
}

// start runs the dev agent as a child of the test binary and waits until it is ready.
func (s *ConsulServer) start() error {
	cmd := exec.Command(s.bin, "agent", "-dev",
		"-node="+s.node,
		"-datacenter="+s.Datacenter(),
		"-bind=127.0.0.1",
		"-client=127.0.0.1",
		"-http-port="+strconv.Itoa(s.ports.http),
		"-serf-lan-port="+strconv.Itoa(s.ports.serfLAN),
		"-serf-wan-port="+strconv.Itoa(s.ports.serfWAN),
		"-server-port="+strconv.Itoa(s.ports.server),
		"-dns-port=-1",
		"-grpc-port=-1",
		"-grpc-tls-port=-1",
		"-log-level=warn",
		"-hcl", `session_ttl_min = "1s"`,
		"-hcl", `disable_update_check = true`,
	)
	if s.token != "" {
		cmd.Args = append(cmd.Args, "-hcl", fmt.Sprintf(`acl {
  enabled                  = true
  default_policy           = "deny"
  enable_token_persistence = false
  tokens {
    initial_management = %q
    agent              = %q
  }
}`, s.token, s.token))
	}
	// No CONSUL_* variables of the caller's environment reach the agent.
	cmd.Env = []string{"HOME=" + os.TempDir(), "PATH=/usr/bin:/bin", "TZ=UTC"}
	cmd.Dir = os.TempDir()
	if err := s.proc.start(cmd); err != nil {
		return err
	}
	if err := s.proc.awaitReady(60*time.Second, 25*time.Millisecond, s.ready); err != nil {
		return fmt.Errorf("consul on port %d: %w", s.ports.http, err)
	}
	return nil
}

// ready reports whether the agent has a leader and its own node is in the catalog with a passing
// serfHealth check (sessions bound to serfHealth cannot be created before).
func (s *ConsulServer) ready() error {
	var leader string
	if err := getJSON("http://"+s.Addr()+"/v1/status/leader", &leader); err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	var checks []struct{ CheckID, Status string }
	url := "http://" + s.Addr() + "/v1/health/node/" + s.node
	if s.token != "" {
		// Without a token, ACLs filter the node's checks out of the answer.
		url += "?token=" + s.token
	}
	if err := getJSON(url, &checks); err != nil {
		return err
	}
	for _, c := range checks {
		if c.CheckID == "serfHealth" && c.Status == "passing" {
			return nil
		}
	}
	return errors.New("node not registered with a passing serfHealth check yet")
}
