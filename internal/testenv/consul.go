package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// This file starts Consul (DESIGN.md §3–4, the Registry port's production store) as `consul agent -dev`: the
// binary `make tools` builds, a single server agent that is its own leader, bound to 127.0.0.1 with free
// ports for HTTP, Serf LAN/WAN and server RPC, DNS and gRPC disabled. Two settings differ from a stock dev
// agent: session_ttl_min is 1s (Consul's default minimum is 10s), so tests of session expiry and
// self-fencing take seconds instead of half a minute, and the update check is off (no network here).
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

// ConsulServer is a Consul dev agent that a test owns. Methods may be called from one goroutine at a time.
type ConsulServer struct {
	bin     string
	node    string
	ports   consulPorts
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
	out     *tailBuffer
}

type consulPorts struct{ http, serfLAN, serfWAN, server int }

var consulNodes atomic.Int64

// StartConsul starts a Consul dev agent for t alone, waits until it has elected itself leader and registered
// its node, and stops it when t ends. Skips under -short; fails when the consul binary is missing (run
// `make tools`).
func StartConsul(t testing.TB) *ConsulServer {
	t.Helper()
	bin := Binary(t, "consul")
	s, err := startConsul(bin)
	if err != nil {
		t.Fatalf("start Consul: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stop Consul: %v", err)
		}
	})
	return s
}

// Addr is the agent's HTTP address, 127.0.0.1:port, as consul/api.Config.Address wants it.
func (s *ConsulServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports.http))
}

// Node is the agent's node name, unique within the test binary.
func (s *ConsulServer) Node() string { return s.node }

// Running reports whether the agent process is up.
func (s *ConsulServer) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop shuts the agent down; clients get connection errors until Start. Everything it held (KV, sessions,
// services) is gone for good.
func (s *ConsulServer) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatalf("stop Consul: %v", err)
	}
}

// Start starts a stopped agent again on the same ports and waits until it is leader. It is a new, empty dev
// agent (see the file comment).
func (s *ConsulServer) Start(t testing.TB) {
	t.Helper()
	if s.Running() {
		t.Fatal("start Consul: already running")
	}
	if err := s.start(); err != nil {
		t.Fatalf("start Consul: %v", err)
	}
}

func startConsul(bin string) (*ConsulServer, error) {
	s := &ConsulServer{bin: bin, node: fmt.Sprintf("warren-test-%d-%d", os.Getpid(), consulNodes.Add(1))}
	// Ports are picked by binding :0 and closing; another process may take one before Consul binds, so try
	// a few times.
	var err error
	for attempt := 0; ; attempt++ {
		if s.ports, err = freeConsulPorts(); err == nil {
			if err = s.start(); err == nil {
				return s, nil
			}
		}
		if attempt == 2 {
			return nil, err
		}
	}
}

// freeConsulPorts picks four distinct free loopback ports. Serf also listens on UDP with the same numbers;
// a TCP-free port is nearly always UDP-free too, and startConsul retries when it is not.
func freeConsulPorts() (consulPorts, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports [4]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return consulPorts{}, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return consulPorts{http: ports[0], serfLAN: ports[1], serfWAN: ports[2], server: ports[3]}, nil
}

// start runs the dev agent as a child of the test binary and waits until it is ready.
func (s *ConsulServer) start() error {
	s.out = newTailBuffer(16 << 10)
	cmd := exec.Command(s.bin, "agent", "-dev",
		"-node="+s.node,
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
	// No CONSUL_* variables of the caller's environment reach the agent.
	cmd.Env = []string{"HOME=" + os.TempDir(), "PATH=/usr/bin:/bin", "TZ=UTC"}
	cmd.Dir = os.TempDir()
	cmd.Stdout, cmd.Stderr = s.out, s.out
	// If the test binary dies without stopping the agent (killed, timed out), the agent goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("consul: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := s.awaitReady(60 * time.Second); err != nil {
		s.stop()
		return fmt.Errorf("consul on port %d: %w\n%s", s.ports.http, err, s.out.String())
	}
	return nil
}

// awaitReady polls until the agent reports a leader and its own node is in the catalog with a passing
// serfHealth check (sessions bound to serfHealth cannot be created before), the process exits, or timeout
// passes.
func (s *ConsulServer) awaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		err := s.ready(client)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited: %v", s.waitErr)
		case <-tick.C:
		}
	}
}

func (s *ConsulServer) ready(client *http.Client) error {
	var leader string
	if err := s.getJSON(client, "/v1/status/leader", &leader); err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	var checks []struct{ CheckID, Status string }
	if err := s.getJSON(client, "/v1/health/node/"+s.node, &checks); err != nil {
		return err
	}
	for _, c := range checks {
		if c.CheckID == "serfHealth" && c.Status == "passing" {
			return nil
		}
	}
	return errors.New("node not registered with a passing serfHealth check yet")
}

func (s *ConsulServer) getJSON(client *http.Client, path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr()+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// stop asks for a graceful shutdown (SIGINT: the agent leaves and exits) and waits for the process; after
// 30 s it kills it.
func (s *ConsulServer) stop() error {
	if !s.Running() {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		return errors.New("consul did not shut down in 30 s: killed")
	}
	return nil
}

// tailBuffer is an io.Writer keeping the last max bytes written to it, safe for concurrent use (the
// agent's stdout and stderr).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
