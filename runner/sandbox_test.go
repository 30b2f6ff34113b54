package runner_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// TestSandboxIsolation checks, from inside the sandbox, what a user's command can and cannot reach.
func TestSandboxIsolation(t *testing.T) {
	h := startRunner(t)
	t.Setenv("WARREN_SANDBOX_TEST_SECRET", h.secretVal)
	run := func(t *testing.T, cmd string) wire.ExecResult {
		t.Helper()
		return h.exec(t, wire.ExecRequest{Command: cmd})
	}

	t.Run("pid namespace", func(t *testing.T) {
		res := run(t, `echo $$; ls /proc | grep -c '^[0-9][0-9]*$'`)
		f := strings.Fields(res.Stdout)
		if len(f) != 2 {
			t.Fatalf("output %q (stderr %q)", res.Stdout, res.Stderr)
		}
		pid, _ := strconv.Atoi(f[0])
		n, _ := strconv.Atoi(f[1])
		if pid < 1 || pid > 5 || n < 1 || n > 8 {
			t.Fatalf("shell pid %d, %d processes visible; want a fresh PID namespace", pid, n)
		}
	})

	t.Run("hidden host paths", func(t *testing.T) {
		for _, p := range []string{
			h.state,
			filepath.Join(h.state, "state-secret.txt"),
			h.other,
			filepath.Join(h.other, "secret.txt"),
			h.secrets,
			filepath.Dir(h.ws),
			"/workspace/../bob/workspace/secret.txt",
			"/workspace/../../users/secrets.env",
		} {
			t.Run(p, func(t *testing.T) {
				res := run(t, "ls -la '"+p+"'; cat '"+p+"'")
				if res.ExitCode == 0 || strings.Contains(res.Stdout, h.secretVal) {
					t.Fatalf("visible in the sandbox: exit %d, stdout %q", res.ExitCode, res.Stdout)
				}
			})
		}
	})

	t.Run("root holds only system dirs", func(t *testing.T) {
		res := run(t, "ls -1 /")
		allowed := []string{"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", "workspace"}
		for _, e := range strings.Fields(res.Stdout) {
			if !slices.Contains(allowed, e) {
				t.Errorf("unexpected /%s in the sandbox (ls / = %q)", e, res.Stdout)
			}
		}
	})

	t.Run("environment is cleared", func(t *testing.T) {
		res := run(t, "env; cat /proc/1/environ")
		if strings.Contains(res.Stdout, h.secretVal) || strings.Contains(res.Stdout, "WARREN_") {
			t.Fatalf("host environment leaked: %q", res.Stdout)
		}
	})

	t.Run("tmp is private", func(t *testing.T) {
		hostFile, err := os.CreateTemp("", "warren-host-*")
		if err != nil {
			t.Fatal(err)
		}
		hostFile.Close()
		t.Cleanup(func() { os.Remove(hostFile.Name()) })
		if res := run(t, "ls "+hostFile.Name()); res.ExitCode == 0 {
			t.Fatalf("host /tmp file visible: %q", res.Stdout)
		}
		name := "warren-sbx-" + randomHex(t, 4)
		if res := run(t, "echo x > /tmp/"+name+" && cat /tmp/"+name); res.Stdout != "x\n" {
			t.Fatalf("cannot use /tmp: %+v", res)
		}
		if _, err := os.Stat(filepath.Join(os.TempDir(), name)); !os.IsNotExist(err) {
			t.Fatalf("sandbox /tmp write reached the host: %v", err)
		}
		if res := run(t, "ls /tmp/"+name); res.ExitCode == 0 {
			t.Fatal("/tmp survived into the next command")
		}
	})

	t.Run("system dirs read-only", func(t *testing.T) {
		for _, p := range []string{"/usr/warren-test", "/etc/warren-test", "/bin/warren-test", "/warren-test"} {
			if res := run(t, "touch "+p); res.ExitCode == 0 {
				t.Errorf("wrote %s", p)
			}
		}
	})

	t.Run("host secrets under /etc masked", func(t *testing.T) {
		if _, err := os.Stat("/etc/shadow"); err != nil {
			t.Skip("no /etc/shadow on this host")
		}
		res := run(t, "cat /etc/shadow")
		if strings.Contains(res.Stdout, "root:") {
			t.Fatal("/etc/shadow readable in the sandbox")
		}
	})

	t.Run("dev and tmp writable", func(t *testing.T) {
		if res := run(t, "echo x > /dev/null && echo y > /tmp/y && echo ok"); res.Stdout != "ok\n" {
			t.Fatalf("%+v", res)
		}
	})

	t.Run("hostname", func(t *testing.T) {
		if res := run(t, "cat /proc/sys/kernel/hostname"); res.Stdout != "warren\n" {
			t.Fatalf("hostname %q", res.Stdout)
		}
	})

	t.Run("workspace writes land on the host", func(t *testing.T) {
		res := run(t, "mkdir -p d && echo hello > d/out.txt && ls -ld /workspace")
		if res.ExitCode != 0 {
			t.Fatalf("%+v", res)
		}
		b, err := os.ReadFile(filepath.Join(h.ws, "d", "out.txt"))
		if err != nil || string(b) != "hello\n" {
			t.Fatalf("host file: %q, %v", b, err)
		}
	})
}
