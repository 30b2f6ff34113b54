package isolate

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// The sandbox's network stack (pasta and the namespace's holder, or the runner's relays on a veth
// network) outlives whatever the tenant does inside the sandbox; if pasta dies anyway, the network notices
// at once, starts pasta again or says it is down.

// TestIsolationNetworkSurvivesMemoryHog: a tenant fills its memory with pages no process owns (its /tmp
// and /dev/shm, tmpfs charged to its cgroup), so the kernel's OOM killer must kill some process of the
// group. When pasta ran among the sandbox's commands it was the largest of them (about 30 MiB resident)
// and died: the model proxy was unreachable until the runner restarted. Now a command dies and the same
// pasta still forwards the model proxy; on a veth network, the runner's relay does.
func TestIsolationNetworkSurvivesMemoryHog(t *testing.T) {
	requireRoot(t)
	for _, stack := range []string{StackVeth, StackPasta} {
		t.Run(stack, func(t *testing.T) { testSurvivesMemoryHog(t, stack) })
	}
}

func testSurvivesMemoryHog(t *testing.T, stack string) {
	proxy := listenIn(t, "", "127.0.0.1:0", "model-proxy")
	port := proxy.Addr().(*net.TCPAddr).Port
	lim := Limits{Processes: 256, MemoryBytes: 96 << 20, TmpBytes: 64 << 20}
	cg, err := NewCgroup("/warren-test", "hog-"+rand.Text()[:8], lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Close() })
	cfg := secureConfigIn(t, t.TempDir(), []uint16{uint16(port)}, cg, stack)
	cfg.Limits = lim
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pasta, oom := pastaPid(cfg.Network), s.OOMKills()
	res, o := sh(t, s, `dd if=/dev/zero of=/tmp/a bs=1M count=60 2>&1; dd if=/dev/zero of=/dev/shm/b bs=1M count=60 2>&1; `+
		`head -c 200m /dev/zero | tail; echo survived`)
	if s.OOMKills() <= oom {
		t.Fatalf("no OOM kill: 120 MiB of tmpfs and a 200 MiB tail under a 96 MiB limit: %+v %q", res, o.stdout.String())
	}
	if pasta == 0 {
		if cfg.Network.veth == nil {
			t.Fatal("a pasta network without pasta")
		}
	} else if err := syscall.Kill(pasta, 0); err != nil || pastaPid(cfg.Network) != pasta || cfg.Network.Err() != nil {
		t.Fatalf("pasta (pid %d) died when the sandbox ran out of memory: %v (now pid %d, network %v)", pasta, err, pastaPid(cfg.Network), cfg.Network.Err())
	}
	if got, e := reach(t, s, "127.0.0.1", port); got != "model-proxy" {
		t.Fatalf("the model proxy after the memory hog: %q (%s)", got, e)
	}
}

// TestIsolationNetworkRestartsPasta: pasta killed from the host (as the test, root) is started again at
// once and the sandbox reaches the model proxy through the new one; one that keeps dying takes the
// network down after maxPastaRestarts, and the sandbox's next command is refused with unavailable
// (ErrNetworkDown), not left to time out.
func TestIsolationNetworkRestartsPasta(t *testing.T) {
	requireRoot(t)
	proxy := listenIn(t, "", "127.0.0.1:0", "model-proxy")
	port := proxy.Addr().(*net.TCPAddr).Port
	restarted := make(chan error, maxPastaRestarts+1)
	cfg := secureConfig(t, t.TempDir(), nil)
	cfg.Network = testNetwork(t, NetworkConfig{Stack: StackPasta, ForwardTCP: []uint16{uint16(port)}, OnRestart: func(err error) { restarted <- err }})
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Network
	for i := range maxPastaRestarts {
		old := pastaPid(n)
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-restarted:
			if pastaPid(n) == old {
				t.Fatalf("restart %d: the same pasta (pid %d)", i+1, old)
			}
			t.Logf("restart %d: %v", i+1, cause)
		case <-n.Down():
			t.Fatalf("restart %d: the network went down: %v", i+1, n.Err())
		case <-time.After(30 * time.Second):
			t.Fatalf("restart %d: pasta was killed and nothing noticed within 30 s", i+1)
		}
		if got, e := reach(t, s, "127.0.0.1", port); got != "model-proxy" {
			t.Fatalf("restart %d: the model proxy through the new pasta: %q (%s)", i+1, got, e)
		}
	}
	if err := syscall.Kill(pastaPid(n), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	requireDown(t, s)
}

// TestIsolationNetworkHolderDies: the namespace's holder killed from the host takes the network down at
// once; commands are refused with unavailable instead of running without a network.
func TestIsolationNetworkHolderDies(t *testing.T) {
	requireRoot(t)
	cfg := secureConfigIn(t, t.TempDir(), nil, nil, StackPasta)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(cfg.Network.holder.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	requireDown(t, s)
}

// requireDown waits (30 s at most) for the sandbox's network to go down, then requires a command to be
// refused with unavailable, wrapping ErrNetworkDown.
func requireDown(t *testing.T, s *Sandbox) {
	t.Helper()
	n := s.network.Load()
	select {
	case <-n.Down():
	case <-time.After(30 * time.Second):
		t.Fatal("the network's process died and the network was not marked down within 30 s")
	}
	_, err := s.Run(context.Background(), Spec{Command: "true", Timeout: 10 * time.Second})
	var we *wire.Error
	if !errors.Is(err, ErrNetworkDown) || !errors.As(err, &we) || we.Code != wire.Unavailable {
		t.Fatalf("a command after the network went down: %v, want unavailable wrapping ErrNetworkDown", err)
	}
	t.Logf("refused: %v", err)
}

// pastaPid is the pid of n's pasta now (0 on a veth network, which has none).
func pastaPid(n *Network) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pasta == nil {
		return 0
	}
	return n.pasta.Process.Pid
}
