package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// bwrapPath returns the bubblewrap binary. Sandbox tests fail without it; only -short may skip them.
func bwrapPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("bwrap")
	if err != nil {
		if testing.Short() {
			t.Skip("bubblewrap not installed (skipped under -short)")
		}
		t.Fatalf("bubblewrap (bwrap) is required for the sandbox tests: install it (apt-get install bubblewrap) or run with -short: %v", err)
	}
	return p
}

func newSandbox(t testing.TB, insecure bool) (*Sandbox, string) {
	t.Helper()
	ws := t.TempDir()
	cfg := Config{Workspace: ws, Insecure: insecure}
	if !insecure {
		cfg = secureConfig(t, ws, nil)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, ws
}

// secureConfig is the production configuration for workspace ws: bubblewrap, a host uid of the sandbox's
// own (when the test runs as root, as in CI) owning ws, and a network of its own forwarding fwd.
func secureConfig(t testing.TB, ws string, fwd []uint16) Config {
	t.Helper()
	return secureConfigIn(t, ws, fwd, nil, "")
}

// secureConfigIn is secureConfig with the sandbox in cg (nil: none), its network of stack ("": the
// default) in cg's network part.
func secureConfigIn(t testing.TB, ws string, fwd []uint16, cg *Cgroup, stack string) Config {
	t.Helper()
	cfg := Config{Workspace: ws, Bwrap: bwrapPath(t)}
	if os.Geteuid() != 0 {
		cfg.HostNetwork = true
		return cfg
	}
	lease, err := AllocateUID(DefaultUIDDir, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Release)
	cfg.HostUID, cfg.HostGID = lease.UID, lease.UID
	if err := Chown(ws, int(lease.UID), int(lease.UID)); err != nil {
		t.Fatal(err)
	}
	cfg.Network = testNetwork(t, NetworkConfig{Stack: stack, ForwardTCP: fwd, Cgroup: cg})
	if cg != nil {
		cfg.Cgroup = cg
	}
	return cfg
}

// testNetwork makes the network cfg describes, with the programs and a uid of its own filled in; it is
// closed when the test ends.
func testNetwork(t testing.TB, cfg NetworkConfig) *Network {
	t.Helper()
	lease, err := AllocateUID(DefaultUIDDir, "network/"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Release)
	cfg.Pasta, cfg.Nsenter = toolPath(t, "pasta", "passt"), toolPath(t, "nsenter", "util-linux")
	cfg.UID, cfg.GID = lease.UID, lease.UID
	n, err := NewNetwork(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// toolPath finds a program the sandbox tests need; they fail without it (only -short may skip them).
func toolPath(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testing.Short() {
			t.Skipf("%s not installed (skipped under -short)", name)
		}
		t.Fatalf("%s is required for the sandbox tests: install it (apt-get install %s, or make tools): %v", name, pkg, err)
	}
	return p
}

type output struct{ stdout, stderr bytes.Buffer }

func run(t testing.TB, s *Sandbox, spec Spec) (Result, *output) {
	t.Helper()
	var o output
	spec.Stdout, spec.Stderr = &o.stdout, &o.stderr
	if spec.Timeout == 0 {
		spec.Timeout = 20 * time.Second
	}
	res, err := s.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Command, err)
	}
	return res, &o
}

func TestNewRequiresBwrap(t *testing.T) {
	_, err := New(Config{Workspace: t.TempDir()})
	if !errors.Is(err, ErrNoBwrap) {
		t.Fatalf("New without bwrap = %v, want ErrNoBwrap", err)
	}
	_, err = New(Config{Workspace: t.TempDir(), Bwrap: "/nonexistent/bwrap"})
	if !errors.Is(err, ErrNoBwrap) {
		t.Fatalf("New with a missing bwrap = %v, want ErrNoBwrap", err)
	}
	if _, err := New(Config{Workspace: "relative", Insecure: true}); !errors.Is(err, ErrConfig) {
		t.Fatalf("relative workspace: %v", err)
	}
}

func TestSystemMounts(t *testing.T) {
	mk := func(t *testing.T, dirs []string, links map[string]string) string {
		root := t.TempDir()
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for l, target := range links {
			if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	t.Run("usrmerge", func(t *testing.T) {
		root := mk(t, []string{"usr/bin", "usr/lib", "etc/ssh"}, map[string]string{"bin": "usr/bin", "lib": "usr/lib", "sbin": "usr/sbin"})
		got, err := systemMounts(root)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"--ro-bind", filepath.Join(root, "usr"), "/usr",
			"--symlink", "usr/bin", "/bin",
			"--symlink", "usr/sbin", "/sbin",
			"--symlink", "usr/lib", "/lib",
		}
		if !slices.Equal(got, want) {
			t.Fatalf("systemMounts =\n%q\nwant\n%q", got, want)
		}
	})
	t.Run("split", func(t *testing.T) {
		root := mk(t, []string{"usr", "bin", "sbin", "lib", "lib64"}, nil)
		got, err := systemMounts(root)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"--ro-bind", filepath.Join(root, "usr"), "/usr",
			"--ro-bind", filepath.Join(root, "bin"), "/bin",
			"--ro-bind", filepath.Join(root, "sbin"), "/sbin",
			"--ro-bind", filepath.Join(root, "lib"), "/lib",
			"--ro-bind", filepath.Join(root, "lib64"), "/lib64",
		}
		if !slices.Equal(got, want) {
			t.Fatalf("systemMounts =\n%q\nwant\n%q", got, want)
		}
	})
}

func TestEtcMounts(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"etc/ssl/certs", "etc/ssl/private", "etc/ssh", "etc/alternatives"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/shadow", "etc/passwd", "etc/ssh/ssh_host_ed25519_key", "etc/ssl/private/k.pem", "etc/ld.so.cache", "etc/machine-id"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/usr/share/zoneinfo/UTC", filepath.Join(root, "etc/localtime")); err != nil {
		t.Fatal(err)
	}
	got, err := etcMounts(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--ro-bind", filepath.Join(root, "etc/alternatives"), "/etc/alternatives",
		"--ro-bind", filepath.Join(root, "etc/ld.so.cache"), "/etc/ld.so.cache",
		"--symlink", "/usr/share/zoneinfo/UTC", "/etc/localtime",
		"--ro-bind", filepath.Join(root, "etc/ssl/certs"), "/etc/ssl/certs",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("etcMounts =\n%q\nwant\n%q", got, want)
	}
}

func TestBwrapArgs(t *testing.T) {
	env := environ(WorkspaceMount, map[string]string{"FOO": "a=b"})
	l := boxLayout{mounts: []string{"--ro-bind", "/usr", "/usr"}, etc: []string{"--ro-bind", "/etc/ssl/certs", "/etc/ssl/certs"}, info: 3, seccomp: 5, workspace: "/srv/ws/alice", tmpBytes: 1 << 20}
	got := strings.Join(bwrapArgs(l, "sub", env, shellArgv("ls", []string{"-l"})), " ")
	for _, want := range []string{
		"--info-fd 3 --unshare-user --uid 1000 --gid 1000 --disable-userns",
		"--die-with-parent --new-session --unshare-pid --unshare-ipc --unshare-uts",
		"--cap-drop ALL --seccomp 5",
		"--ro-bind /usr /usr --tmpfs /etc --ro-bind /etc/ssl/certs /etc/ssl/certs --remount-ro /etc --proc /proc --ro-bind /proc/sys /proc/sys --ro-bind /dev/null /proc/cmdline --dev /dev",
		"--size 1048576 --tmpfs /dev/shm --remount-ro /dev",
		"--size 1048576 --tmpfs /tmp --bind /srv/ws/alice /workspace --remount-ro / --chdir /workspace/sub --clearenv",
		"--setenv FOO a=b --setenv HOME /workspace --setenv LANG C.UTF-8",
		`-- /bin/sh -c exec "$0" "$@" ls -l`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("bwrap args %q\nlack %q", got, want)
		}
	}
	if strings.Contains(got, "--unshare-net") {
		t.Error("the network namespace comes from nsenter, not bwrap")
	}
}

func TestValidateEnv(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"FOO", true}, {"_x9", true}, {"a", true},
		{"", false}, {"9A", false}, {"A-B", false}, {"A=B", false}, {"A B", false}, {"Ä", false},
	} {
		err := ValidateEnv(map[string]string{tt.name: "v"})
		if (err == nil) != tt.ok {
			t.Errorf("ValidateEnv(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && (wire.CodeOf(err) != wire.InvalidArgument || !errors.Is(err, ErrInvalidSpec)) {
			t.Errorf("ValidateEnv(%q) = %v, want invalid_argument wrapping ErrInvalidSpec", tt.name, err)
		}
	}
	if err := ValidateEnv(map[string]string{"A": "x\x00y"}); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("NUL in value: %v", err)
	}
}

// TestRun runs the same behaviours in both modes.
func TestRun(t *testing.T) {
	for _, mode := range []struct {
		name     string
		insecure bool
	}{{"bwrap", false}, {"insecure", true}} {
		t.Run(mode.name, func(t *testing.T) {
			s, ws := newSandbox(t, mode.insecure)
			if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("WARREN_ISOLATE_TEST_SECRET", "leak")
			tests := []struct {
				name       string
				spec       Spec
				code       int
				stdout     string
				stderrHave string
			}{
				{name: "exit code and streams", spec: Spec{Command: "echo out; echo err >&2; exit 3"}, code: 3, stdout: "out\n", stderrHave: "err"},
				{name: "stdin", spec: Spec{Command: "cat", Stdin: strings.NewReader("hello")}, stdout: "hello"},
				{name: "env", spec: Spec{Command: `echo "$FOO|$USER|$TERM|$WARREN_ISOLATE_TEST_SECRET"`, Env: map[string]string{"FOO": "bar"}}, stdout: "bar|sandbox|dumb|\n"},
				{name: "cwd", spec: Spec{Command: `basename "$PWD"`, Dir: "sub"}, stdout: "sub\n"},
				{name: "args are not interpreted", spec: Spec{Command: "printf", Args: []string{"%s|", "a b", "$HOME", ";"}}, stdout: "a b|$HOME|;|"},
				{name: "missing program", spec: Spec{Command: "no-such-program-warren", Args: []string{"x"}}, code: 127, stderrHave: "not found"},
				{name: "signal", spec: Spec{Command: "kill -TERM $$"}, code: 128 + 15},
				{name: "background child does not hold the request", spec: Spec{Command: "sleep 30 & echo started"}, stdout: "started\n"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					res, o := run(t, s, tt.spec)
					if res.ExitCode != tt.code || res.TimedOut {
						t.Errorf("exit = %d (timedOut %v), want %d; stderr %q", res.ExitCode, res.TimedOut, tt.code, o.stderr.String())
					}
					if tt.stdout != "" && o.stdout.String() != tt.stdout {
						t.Errorf("stdout = %q, want %q", o.stdout.String(), tt.stdout)
					}
					if !strings.Contains(o.stderr.String(), tt.stderrHave) {
						t.Errorf("stderr = %q, want it to contain %q", o.stderr.String(), tt.stderrHave)
					}
				})
			}
			t.Run("timeout kills the tree", func(t *testing.T) {
				marker := fmt.Sprintf("86400.%d", rand.Uint32())
				res, _ := run(t, s, Spec{Command: fmt.Sprintf("sleep %s & (sleep %s; echo late) & sleep %s", marker, marker, marker), Timeout: 300 * time.Millisecond})
				if !res.TimedOut || res.ExitCode != ExitTimedOut {
					t.Fatalf("result %+v, want timed out with %d", res, ExitTimedOut)
				}
				waitNoProcess(t, "sleep "+marker)
			})
			t.Run("cancel kills", func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				started := make(chan struct{})
				var out lineSignal
				out.match, out.ch = "ready", started
				go func() { <-started; cancel() }()
				_, err := s.Run(ctx, Spec{Command: "echo ready; exec sleep 60", Stdout: &out, Timeout: time.Minute})
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Run after cancel = %v, want context.Canceled", err)
				}
			})
		})
	}
}

// lineSignal closes ch the first time a write contains match.
type lineSignal struct {
	match string
	ch    chan struct{}
	done  bool
}

func (l *lineSignal) Write(p []byte) (int, error) {
	if !l.done && bytes.Contains(p, []byte(l.match)) {
		l.done = true
		close(l.ch)
	}
	return len(p), nil
}

// waitNoProcess polls the host's /proc until no process's command line contains marker.
func waitNoProcess(t testing.TB, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := findProcesses(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v (%q) still alive after the command was killed", pids, marker)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func findProcesses(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestListeningPorts(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9F51 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0 100 0 0 10 0
   1: 0100007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0 100 0 0 10 0
   2: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 3 1 0 100 0 0 10 0
`
	got := listeningPorts(table)
	if len(got) != 2 || got[0] != 0x9F51 || got[1] != 8080 {
		t.Fatalf("listening ports: %v, want [40785 8080] (an established socket is not listening)", got)
	}
}
