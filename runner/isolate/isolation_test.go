package isolate

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The TestIsolation… tests attack the sandbox the way a tenant with an ordinary token would, from a
// command of their own, and require the operating system's refusal (or a limit) each time. They run as
// root in CI: the sandbox then runs as a host uid of its own, with a network and a cgroup of its own.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("isolation tests need root (skipped under -short)")
		}
		t.Fatal("the isolation tests need root, as the runner has in CI and under Nomad: run them as root or with -short")
	}
}

func sh(t *testing.T, s *Sandbox, script string) (Result, *output) {
	t.Helper()
	return run(t, s, Spec{Command: script, Timeout: 60 * time.Second})
}

func TestIsolationKernelKnobs(t *testing.T) {
	requireRoot(t)
	s, ws := newSandbox(t, false)
	before, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	for _, f := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/vm/panic_on_oom", "/proc/sys/kernel/sysrq", "/proc/sysrq-trigger"} {
		res, o := sh(t, s, "printf '|/workspace/pwn' > "+f)
		if res.ExitCode == 0 {
			t.Errorf("write to %s succeeded", f)
		}
		if e := o.stderr.String(); !strings.Contains(e, "Read-only file system") && !strings.Contains(e, "Permission denied") &&
			!strings.Contains(e, "nonexistent") && !strings.Contains(e, "No such file") {
			t.Errorf("write to %s: stderr %q, want the kernel's refusal", f, o.stderr.String())
		}
	}
	if after, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(after) != string(before) {
		t.Fatalf("core_pattern changed: %q -> %q", before, after)
	}
	// Nobody inside is host root: the sandbox's files belong to its own unprivileged host uid.
	res, o := sh(t, s, "id -u; touch mine")
	if res.ExitCode != 0 || strings.TrimSpace(o.stdout.String()) != strconv.Itoa(SandboxUID) {
		t.Fatalf("id -u = %q (exit %d, %q)", o.stdout.String(), res.ExitCode, o.stderr.String())
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(ws, "mine"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid == 0 || st.Uid != s.cfg.HostUID {
		t.Fatalf("a file the sandbox made belongs to host uid %d, want its own %d", st.Uid, s.cfg.HostUID)
	}
	// No capability survives, no namespace can be made to get one back, and the denied syscalls fail.
	res, o = sh(t, s, `grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; unshare -U true && echo USERNS; unshare -n true && echo NETNS; `+
		`for n in 165 321 250 298 246 425; do perl -e '$r = syscall('$n', 0, 0, 0, 0, 0); print "'$n' $r ", 0+$!, "\n"'; done`)
	out := o.stdout.String()
	for _, l := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000"} {
		if !strings.Contains(out, l) {
			t.Errorf("capabilities: %q lacks %q", out, l)
		}
	}
	if strings.Contains(out, "USERNS") || strings.Contains(out, "NETNS") {
		t.Errorf("a namespace could be made inside the sandbox: %q", out)
	}
	// mount, bpf, keyctl, perf_event_open, kexec_load, io_uring_setup: -1 with EPERM (1).
	for _, n := range []string{"165", "321", "250", "298", "246", "425"} {
		if !strings.Contains(out, n+" -1 1\n") {
			t.Errorf("syscall %s was not refused with EPERM: %q", n, out)
		}
	}
}

func TestIsolationRootOnlyFiles(t *testing.T) {
	requireRoot(t)
	s, ws := newSandbox(t, false)
	// A root-only file inside the workspace itself (the runner's own, say) stays unreadable.
	if err := os.WriteFile(filepath.Join(ws, "root-only"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ws, "root-only"), 0, 0); err != nil {
		t.Fatal(err)
	}
	_, o := sh(t, s, "cat /workspace/root-only; cat /etc/shadow; ls /etc/ssl/private; cat /etc/machine-id; ls /root /home /var /run /sys 2>&1 | head -3; cat /etc/passwd")
	if strings.Contains(o.stdout.String(), "s3cret") || strings.Contains(o.stdout.String(), "root:$") {
		t.Fatalf("a root-only secret was read: %q", o.stdout.String())
	}
	if !strings.Contains(o.stderr.String(), "root-only: Permission denied") {
		t.Errorf("reading a root-only file: %q, want Permission denied", o.stderr.String())
	}
	for _, f := range []string{"/etc/shadow", "/etc/ssl/private", "/etc/machine-id"} {
		if !strings.Contains(o.stderr.String(), f+": No such file") && !strings.Contains(o.stderr.String(), "'"+f+"': No such file") {
			t.Errorf("%s is there: %q", f, o.stderr.String())
		}
	}
	// /etc is the sandbox's own: its users only.
	if p := o.stdout.String(); !strings.Contains(p, "sandbox:x:1000:1000") || strings.Count(p, ":x:") != 3 {
		t.Errorf("/etc/passwd in the sandbox: %q", p)
	}
}

func TestIsolationOtherTenants(t *testing.T) {
	requireRoot(t)
	a, wsA := newSandbox(t, false)
	b, _ := newSandbox(t, false)
	if a.cfg.HostUID == b.cfg.HostUID {
		t.Fatalf("two sandboxes share host uid %d", a.cfg.HostUID)
	}
	if res, o := sh(t, a, "echo tenant-a-secret > secret; chmod 600 secret"); res.ExitCode != 0 {
		t.Fatal(o.stderr.String())
	}
	// B can name A's host path, but it is not in B's mount namespace; and even a bind of it (a bug) would
	// meet a file another uid owns with mode 0600.
	res, o := sh(t, b, "cat "+filepath.Join(wsA, "secret")+"; ls "+filepath.Dir(wsA))
	if res.ExitCode == 0 || strings.Contains(o.stdout.String(), "tenant-a-secret") {
		t.Fatalf("B read A's workspace: %q", o.stdout.String())
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(wsA, "secret"), &st); err != nil || st.Uid != a.cfg.HostUID || st.Mode&0o077 != 0 {
		t.Fatalf("A's file: uid %d mode %o (%v)", st.Uid, st.Mode&0o777, err)
	}
	// B's processes cannot see or signal A's: separate PID namespaces.
	pa, err := a.Start(context.Background(), ProcessSpec{Command: "sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	_, o = sh(t, b, "pgrep -xc sleep; kill -9 -1; true")
	if n := strings.TrimSpace(o.stdout.String()); n != "0" {
		t.Errorf("B sees %s processes matching A's command", n)
	}
	select {
	case <-pa.Done():
		t.Fatal("B killed A's process")
	case <-time.After(200 * time.Millisecond):
	}
}

// listenIn listens on addr inside the network namespace at nsPath (or the test's own when "") and answers
// every connection with banner.
func listenIn(t *testing.T, nsPath, addr, banner string) net.Listener {
	t.Helper()
	var ln net.Listener
	socketIn(t, nsPath, func() (err error) { ln, err = net.Listen("tcp", addr); return err })
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, banner)
			c.Close()
		}
	}()
	return ln
}

// socketIn runs open (which makes a socket) in the network namespace at nsPath ("": the test's own).
func socketIn(t *testing.T, nsPath string, open func() error) {
	t.Helper()
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if nsPath == "" {
			err = open()
			return
		}
		// The thread goes into the namespace for the socket and comes back: a goroutine that ended
		// locked on the main thread would leave the whole process's namespace (/proc/self) changed.
		runtime.LockOSThread()
		own, e := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if e != nil {
			err = e
			return // locked: the runtime ends this thread
		}
		defer unix.Close(own)
		fd, e := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if e != nil {
			err = e
			return
		}
		defer unix.Close(fd)
		if e := unix.Setns(fd, unix.CLONE_NEWNET); e != nil {
			err = e
			return
		}
		err = open()
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if err != nil {
		t.Fatalf("socket in %q: %v", nsPath, err)
	}
}

// testHost makes a network namespace reached from the test's own through a veth pair, the namespace's
// end at addr/25 and ours at gw/25 (a host on a network the test creates), and listens on addr:port there.
// With routed, addr is not on the link: the pair is 203.0.113.0/30 and addr lies beyond it (a host
// somewhere on the internet, not a neighbour of this one).
func testHost(t *testing.T, addr, gw string, port int, banner string, routed bool) {
	t.Helper()
	name, ip := vethNamespace(t)
	if routed {
		ip("addr", "add", "203.0.113.1/30", "dev", name+"a")
		ip("link", "set", name+"a", "up")
		ip("-n", name, "addr", "add", "203.0.113.2/30", "dev", name+"b")
		ip("-n", name, "addr", "add", addr+"/32", "dev", "lo")
		ip("-n", name, "link", "set", name+"b", "up")
		ip("-n", name, "link", "set", "lo", "up")
		ip("route", "add", addr+"/32", "via", "203.0.113.2")
		t.Cleanup(func() { _ = exec.Command("ip", "route", "del", addr+"/32").Run() })
	} else {
		ip("addr", "add", gw+"/25", "dev", name+"a")
		ip("link", "set", name+"a", "up")
		ip("-n", name, "addr", "add", addr+"/25", "dev", name+"b")
		ip("-n", name, "link", "set", name+"b", "up")
		ip("-n", name, "link", "set", "lo", "up")
	}
	listenIn(t, "/run/netns/"+name, net.JoinHostPort(addr, strconv.Itoa(port)), banner)
}

// vethNamespace makes a network namespace, name, and a veth pair, name+"a" in the test's own namespace and
// name+"b" in the new one, removed when the test ends; ip runs the ip command, failing the test on error.
func vethNamespace(t *testing.T) (name string, ip func(args ...string)) {
	t.Helper()
	name = "wt" + rand.Text()[:8]
	ip = func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip("link", "add", name+"a", "type", "veth", "peer", "name", name+"b")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", name+"a").Run() })
	ip("link", "set", name+"b", "netns", name)
	return name, ip
}

// reach tries a TCP connection from inside the sandbox and returns the first line read, or "" and the
// shell's error.
func reach(t *testing.T, s *Sandbox, host string, port int) (string, string) {
	t.Helper()
	_, o := sh(t, s, fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%d && head -1 <&3'`, host, port))
	return strings.TrimSpace(o.stdout.String()), strings.TrimSpace(o.stderr.String())
}

// dialFromHost checks that the test itself reaches addr, so a refusal from the sandbox is the sandbox's.
func dialFromHost(t *testing.T, addr string) {
	t.Helper()
	var c net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		out, _ := exec.Command("sh", "-c", "ip route; ip -br addr; ip netns list; for n in $(ip netns list | cut -d' ' -f1); do ip -n $n -br addr; done").CombinedOutput()
		t.Fatalf("the host itself cannot reach %s: %v\n%s", addr, err, out)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if line == "" {
		t.Fatalf("no banner from %s", addr)
	}
}

func TestIsolationNetwork(t *testing.T) {
	requireRoot(t)
	toolPath(t, "ip", "iproute2")
	// Host listeners: one the sandbox must not reach (another runner, the edge, Consul…), one forwarded
	// to it (the runner's model proxy).
	private := listenIn(t, "", "127.0.0.1:0", "host-private")
	proxy := listenIn(t, "", "127.0.0.1:0", "model-proxy")
	everywhere := listenIn(t, "", "0.0.0.0:0", "host-any")
	proxyPort := proxy.Addr().(*net.TCPAddr).Port
	// A cloud metadata service and a public host, each on a network this test makes (before the sandbox's
	// network: the host's addresses are read when it starts).
	testHost(t, "169.254.169.254", "169.254.169.253", 80, "metadata", false)
	testHost(t, "203.0.114.10", "", 8080, "public", true)
	testHost(t, "203.0.114.130", "203.0.114.129", 8081, "neighbour", false)
	dialFromHost(t, "169.254.169.254:80")
	dialFromHost(t, "203.0.114.10:8080")
	dialFromHost(t, "203.0.114.130:8081")
	for _, stack := range []string{StackVeth, StackPasta} {
		t.Run(stack, func(t *testing.T) {
			s, err := New(secureConfigIn(t, t.TempDir(), []uint16{uint16(proxyPort)}, nil, stack))
			if err != nil {
				t.Fatal(err)
			}
			testNetworkRefusals(t, s, private, everywhere, proxyPort)
		})
	}
}

// testNetworkRefusals is TestIsolationNetwork against one sandbox.
func testNetworkRefusals(t *testing.T, s *Sandbox, private, everywhere net.Listener, proxyPort int) {

	t.Run("forwarded model proxy", func(t *testing.T) {
		if got, e := reach(t, s, "127.0.0.1", proxyPort); got != "model-proxy" {
			t.Fatalf("model proxy port: %q (%s)", got, e)
		}
	})
	t.Run("public internet", func(t *testing.T) {
		if got, e := reach(t, s, "203.0.114.10", 8080); got != "public" {
			t.Fatalf("public host: %q (%s)", got, e)
		}
	})
	refused := map[string]int{
		"host loopback":                     private.Addr().(*net.TCPAddr).Port,
		"host loopback, any addr":           everywhere.Addr().(*net.TCPAddr).Port,
		"metadata 169.254.169.254":          80,
		"a neighbour on the host's network": 8081,
	}
	hosts := map[string]string{"host loopback": "127.0.0.1", "host loopback, any addr": "127.0.0.1", "metadata 169.254.169.254": "169.254.169.254",
		"a neighbour on the host's network": "203.0.114.130"}
	for name, port := range refused {
		t.Run(name, func(t *testing.T) {
			if got, e := reach(t, s, hosts[name], port); got != "" {
				t.Fatalf("reached %s:%d: %q (%s)", hosts[name], port, got, e)
			}
		})
	}
	t.Run("host addresses", func(t *testing.T) {
		addrs, err := hostAddrs()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if a.Addr().IsLoopback() || a.Addr().Is6() {
				continue
			}
			if got, _ := reach(t, s, a.Addr().String(), everywhere.Addr().(*net.TCPAddr).Port); got != "" {
				t.Errorf("reached the host at %s: %q", a.Addr(), got)
			}
		}
	})
	t.Run("filter cannot be changed", func(t *testing.T) {
		_, o := sh(t, s, "ip route del default 2>&1; ip link set eth0 down 2>&1; ip link set tap0 down 2>&1; nft flush ruleset 2>&1; ip route 2>&1 | head -1")
		if !strings.Contains(o.stdout.String(), "default") {
			t.Fatalf("the sandbox changed its routes: %q", o.stdout.String())
		}
	})
}

func TestIsolationLimits(t *testing.T) {
	requireRoot(t)
	ws := t.TempDir()
	cfg := secureConfig(t, ws, nil)
	lim := Limits{Processes: 64, MemoryBytes: 96 << 20, CPUMillis: 200, TmpBytes: 4 << 20, FileBytes: 8 << 20}
	cg, err := NewCgroup("/warren-test", "limits-"+rand.Text()[:8], lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Close() })
	cfg.Cgroup, cfg.Limits = cg, lim
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	alive := func(t *testing.T) {
		t.Helper()
		if res, o := sh(t, s, "echo alive"); strings.TrimSpace(o.stdout.String()) != "alive" {
			t.Fatalf("the sandbox does not answer after the attack: %+v %q", res, o.stderr.String())
		}
	}
	t.Run("fork bomb", func(t *testing.T) {
		hits := pidsMaxHits(t, cg)
		_, o := sh(t, s, `i=0; while [ $i -lt 300 ]; do sleep 10 & i=$((i+1)); done; echo tried`)
		if after := pidsMaxHits(t, cg); after <= hits {
			t.Fatalf("300 processes started under a limit of 64 (pids max events %d -> %d; %q)", hits, after, o.stderr.String())
		}
		if !strings.Contains(o.stderr.String(), "fork") && !strings.Contains(o.stderr.String(), "Resource temporarily unavailable") {
			t.Errorf("no fork failure reported: %q", o.stderr.String())
		}
		alive(t)
	})
	t.Run("memory hog", func(t *testing.T) {
		oom := s.OOMKills()
		res, _ := sh(t, s, `head -c 400m /dev/zero | tail > /dev/null; echo survived`)
		if res.ExitCode != 137 && s.OOMKills() <= oom {
			t.Fatalf("a 400 MiB hog under a 96 MiB limit: exit %d, OOM kills %d -> %d", res.ExitCode, oom, s.OOMKills())
		}
		alive(t)
	})
	t.Run("disk fill", func(t *testing.T) {
		_, o := sh(t, s, `dd if=/dev/zero of=big bs=1M count=64`)
		if !strings.Contains(o.stderr.String(), "File size limit exceeded") && !strings.Contains(o.stderr.String(), "File too large") {
			t.Fatalf("a 64 MiB file under an 8 MiB limit: %q", o.stderr.String())
		}
		fi, err := os.Stat(filepath.Join(ws, "big"))
		if err != nil || fi.Size() > 8<<20 {
			t.Fatalf("big: %v, %v", fi.Size(), err)
		}
		alive(t)
	})
	t.Run("tmp fill", func(t *testing.T) {
		_, o := sh(t, s, `dd if=/dev/zero of=/tmp/big bs=1M count=3 2>/dev/null; dd if=/dev/zero of=/tmp/big2 bs=1M count=3 2>&1`)
		if !strings.Contains(o.stdout.String(), "No space left on device") {
			t.Fatalf("/tmp beyond 4 MiB: %q", o.stdout.String())
		}
	})
	t.Run("cpu hog", func(t *testing.T) {
		// Two busy loops for 2 s of wall time get at most 0.2 cores between them.
		before := cgroupCPU(t, cg)
		_, o := sh(t, s, `for i in 1 2; do timeout 2 sh -c 'while :; do :; done' & done; wait; `+
			`awk '{print $14+$15+$16+$17}' /proc/self/stat; grep -E '^(usage_usec|user_usec)' /sys/fs/cgroup/cpu.stat 2>/dev/null; cat /proc/1/stat | cut -d' ' -f14-17`)
		used := cgroupCPU(t, cg) - before
		if used > 1.0 { // 0.4 s allowed by the quota; 4 s if it did not hold
			t.Fatalf("the sandbox used %.2f CPU seconds in 2 s under a 0.2-core limit (%q)", used, o.stdout.String())
		}
	})
	t.Run("limits change live", func(t *testing.T) {
		if err := s.SetLimits(Limits{Processes: 16, MemoryBytes: 96 << 20, FileBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
		res, _ := sh(t, s, `dd if=/dev/zero of=big2 bs=1M count=4 2>/dev/null`)
		if res.ExitCode == 0 {
			t.Fatal("the lowered file size limit did not apply")
		}
	})
}

// pidsMaxHits is how often the group refused a fork for its pids limit.
func pidsMaxHits(t *testing.T, cg *Cgroup) int64 {
	t.Helper()
	file := filepath.Join(CgroupMount, "pids", cg.commands.rel, "pids.events")
	if cg.commands.v2 != nil {
		file = filepath.Join(CgroupMount, cg.commands.rel, "pids.events")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strings.CutPrefix(strings.TrimSpace(string(b)), "max ")
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// cgroupCPU reads the CPU seconds the group has used.
func cgroupCPU(t *testing.T, cg *Cgroup) float64 {
	t.Helper()
	if cg.top.v2 != nil {
		b, err := os.ReadFile(filepath.Join(CgroupMount, cg.rel, "cpu.stat"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n / 1e6
			}
		}
		t.Fatal("no usage_usec")
	}
	b, err := os.ReadFile(filepath.Join(CgroupMount, "cpuacct", cg.rel, "cpuacct.usage"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	return n / 1e9
}

var _ = io.Discard
var _ = syscall.SIGKILL

// TestIsolationEnvironmentStaysInside: a tenant's environment reaches its command only, never the
// programs that set the sandbox up (nsenter runs as root): an LD_PRELOAD naming a host library would
// otherwise run the tenant's code outside the boundary.
func TestIsolationEnvironmentStaysInside(t *testing.T) {
	requireRoot(t)
	cc := toolPath(t, "cc", "gcc")
	dir := t.TempDir()
	marker := filepath.Join(dir, "loaded")
	src := filepath.Join(dir, "evil.c")
	lib := filepath.Join(dir, "evil.so")
	code := `#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void pwn(void) {
	FILE *f = fopen("` + marker + `", "a");
	if (f) { fprintf(f, "uid %d\n", (int)getuid()); fclose(f); }
}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	if err := MakeReachable(lib); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // so any uid could write the marker
		t.Fatal(err)
	}
	s, _ := newSandbox(t, false)
	res, o := run(t, s, Spec{Command: "echo $LD_PRELOAD", Env: map[string]string{"LD_PRELOAD": lib, "ENV": lib, "BASH_ENV": lib}, Timeout: time.Minute})
	if res.ExitCode != 0 || strings.TrimSpace(o.stdout.String()) != lib {
		t.Fatalf("the command's environment: %q (exit %d, %q)", o.stdout.String(), res.ExitCode, o.stderr.String())
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("the tenant's LD_PRELOAD ran outside the sandbox: %s", b)
	}
}

// TestIsolationHardening: the smaller doors a review found open.
func TestIsolationHardening(t *testing.T) {
	requireRoot(t)
	// A descriptor the runner inherited without close-on-exec never reaches a sandbox.
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	s, _ := newSandbox(t, false)
	_, o := sh(t, s, `ls /proc/self/fd | tr '\n' ' '; echo; `+
		`perl -e 'use Socket; socket(my $s, 40, SOCK_STREAM, 0) or print 0+$!, "\n"'; `+ // AF_VSOCK
		`touch /dev/x 2>&1; ulimit -H -c; wc -c < /proc/cmdline; ulimit -c unlimited 2>&1`)
	lines := strings.Split(o.stdout.String(), "\n")
	if len(lines) < 5 {
		t.Fatalf("output %q (stderr %q)", o.stdout.String(), o.stderr.String())
	}
	if fds := strings.Fields(lines[0]); len(fds) > 4 { // 0 1 2 and ls's own directory
		t.Errorf("descriptors inside the sandbox: %v", fds)
	}
	if lines[1] != strconv.Itoa(int(unix.EAFNOSUPPORT)) {
		t.Errorf("socket(AF_VSOCK): %q, want EAFNOSUPPORT", lines[1])
	}
	if !strings.Contains(lines[2], "Read-only file system") {
		t.Errorf("writing to /dev: %q", lines[2])
	}
	if lines[3] != "0" {
		t.Errorf("hard core size limit %q, want 0", lines[3])
	}
	if !strings.Contains(o.stderr.String(), "/proc/cmdline: Permission denied") {
		t.Errorf("/proc/cmdline (the host's kernel command line) is readable: %q", o.stderr.String())
	}
	if !strings.Contains(o.stdout.String()+o.stderr.String(), "not permitted") {
		t.Errorf("core dumps could be turned back on: %q %q", o.stdout.String(), o.stderr.String())
	}
	// The network runs as a uid of its own, never the sandbox's.
	if n := s.network.Load(); n == nil || n.cfg.UID == s.cfg.HostUID {
		t.Fatal("the network runs as the sandbox's uid")
	}
	n := s.network.Load()
	cfg := s.cfg
	cfg.HostUID, cfg.HostGID = n.cfg.UID, n.cfg.GID
	if _, err := New(cfg); err == nil {
		t.Fatal("New accepted a sandbox running as its network's uid")
	}
}

// TestIsolationSecretsOffTheCommandLine: a command's environment (the agent's session key) is not on any
// host command line, which every host user can read.
func TestIsolationSecretsOffTheCommandLine(t *testing.T) {
	requireRoot(t)
	s, _ := newSandbox(t, false)
	secret := "sk-test-" + rand.Text()
	p, err := s.Start(context.Background(), ProcessSpec{Command: "echo $KEY; sleep 30", Env: map[string]string{"KEY": secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	line, _ := bufio.NewReader(p.Stdout).ReadString('\n')
	if strings.TrimSpace(line) != secret {
		t.Fatalf("the command's environment: %q", line)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), secret) {
			t.Fatalf("process %s shows the secret on its command line: %q", e.Name(), b)
		}
	}
}

// TestIsolationNetworkInCgroup: pasta and the namespace's holder run in the network part of the
// sandbox's cgroup, not among its commands: what they spend counts against the sandbox's CPU quota, and
// the OOM killer of the commands' part never chooses them.
func TestIsolationNetworkInCgroup(t *testing.T) {
	requireRoot(t)
	cg, err := NewCgroup("/warren-test", "net-"+rand.Text()[:8], Limits{Processes: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Close() })
	n := testNetwork(t, NetworkConfig{Stack: StackPasta, Cgroup: cg})
	network, commands := cgroupProcs(t, cg.network), cgroupProcs(t, cg.commands)
	for _, pid := range []int{n.holder.Process.Pid, pastaPid(n)} {
		if !slices.Contains(network, strconv.Itoa(pid)) || slices.Contains(commands, strconv.Itoa(pid)) {
			t.Errorf("pid %d: not in the network's part of the cgroup (network %v, commands %v)", pid, network, commands)
		}
	}
}

// cgroupProcs lists the processes of one part of a sandbox's cgroup.
func cgroupProcs(t *testing.T, n node) []string {
	t.Helper()
	file := filepath.Join(CgroupMount, "pids", n.rel, "cgroup.procs")
	if n.v2 != nil {
		file = filepath.Join(CgroupMount, n.rel, "cgroup.procs")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}
