package isolate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// WorkspaceMount is where the workspace appears inside the sandbox; commands start there and HOME points
// there.
const WorkspaceMount = "/workspace"

// Hostname is the sandbox's hostname (UTS namespace).
const Hostname = "warren"

// systemDirs are the host paths made visible, read-only, inside the sandbox. Anything else of the host
// (data dirs, the runner's state dir, other users' workspaces, /home, /root, /var, /run, /srv, /mnt) is
// absent.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// maskedFiles are secrets of the host that live under /etc; they are covered with /dev/null (which the
// nodev bind makes unreadable) because the sandbox shares the runner's uid and could otherwise read files
// only the owner may read.
var maskedFiles = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*_key"}

// systemMounts returns the bwrap arguments that reproduce the system directories found under hostRoot ("/"
// outside tests). A directory is bind-mounted read-only; a symlink (usrmerge: /bin -> usr/bin) is recreated
// as the same symlink, so it resolves inside the read-only /usr; a missing entry is skipped.
func systemMounts(hostRoot string) ([]string, error) {
	var args []string
	etcIsDir := false
	for _, d := range systemDirs {
		host := filepath.Join(hostRoot, d)
		fi, err := os.Lstat(host)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", host, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", host, err)
			}
			args = append(args, "--symlink", target, d)
		case fi.IsDir():
			args = append(args, "--ro-bind", host, d)
			etcIsDir = etcIsDir || d == "/etc"
		}
	}
	if !etcIsDir {
		return args, nil
	}
	for _, pat := range maskedFiles {
		matches, err := filepath.Glob(filepath.Join(hostRoot, pat))
		if err != nil {
			return nil, fmt.Errorf("glob %s: %w", pat, err)
		}
		for _, m := range matches {
			fi, err := os.Lstat(m)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			rel, err := filepath.Rel(hostRoot, m)
			if err != nil {
				return nil, fmt.Errorf("mask %s: %w", m, err)
			}
			args = append(args, "--ro-bind", "/dev/null", "/"+filepath.ToSlash(rel))
		}
	}
	return args, nil
}

// bwrapArgs is the bubblewrap command line (after the program name) running inner in dir (relative to the
// workspace) with exactly env.
//
//   - new PID, IPC, UTS (and, where supported, cgroup) namespaces: the command sees only its own processes;
//   - --die-with-parent: if the runner or the outer bwrap dies, the sandbox's init dies and the kernel kills
//     every process in the PID namespace, so a kill of the outer bwrap reaches the whole tree;
//   - --new-session: no controlling terminal to inject input into (TIOCSTI);
//   - --cap-drop ALL: no capabilities even when the runner runs as root;
//   - system dirs read-only, fresh /proc and minimal /dev, a private /tmp per command, the workspace
//     read-write at /workspace, nothing else; the sandbox's own root is remounted read-only so /tmp and
//     /workspace are the only writable places;
//   - --clearenv: only env is set;
//   - the network namespace stays shared (the agent will reach the runner's loopback LLM proxy).
//
// binds (already validated) are mounted after the workspace, before the root is remounted read-only; a
// bind keeps its own read-only or read-write flag.
func bwrapArgs(mounts []string, workspace, dir string, binds []Bind, env, inner []string) []string {
	a := []string{
		"--info-fd", "3", // the sandbox's init pid, see boxCmd
		"--die-with-parent", "--new-session",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", Hostname,
		"--cap-drop", "ALL",
	}
	a = append(a, mounts...)
	a = append(a,
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/tmp",
		"--bind", workspace, WorkspaceMount,
	)
	for _, b := range binds {
		flag := "--ro-bind"
		if b.Writable {
			flag = "--bind"
		}
		a = append(a, flag, b.Host, b.Sandbox)
	}
	a = append(a,
		"--remount-ro", "/",
		"--chdir", path.Join(WorkspaceMount, dir),
		"--clearenv",
	)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--")
	return append(a, inner...)
}

// shellArgv is what runs inside the boundary. Without args the command is a shell script for /bin/sh -c.
// With args the command is executed directly with exactly those arguments, through
// `/bin/sh -c 'exec "$0" "$@"'` so that it is looked up in the sandbox's PATH (not the runner's) and a
// missing program exits 127 with "not found" on stderr in both modes; no word splitting or expansion
// happens to command or args.
func shellArgv(command string, args []string) []string {
	if len(args) == 0 {
		return []string{"/bin/sh", "-c", command}
	}
	return append([]string{"/bin/sh", "-c", `exec "$0" "$@"`, command}, args...)
}

// Bind makes a host file or directory visible inside the sandbox (bubblewrap only; see ProcessSpec).
type Bind struct {
	// Host is the absolute host path; it must exist.
	Host string
	// Sandbox is the absolute, clean path inside the sandbox. It may not be the root, /proc, /dev, the
	// workspace or a system directory, nor lie under one of them: those are mounted by the sandbox itself.
	Sandbox string
	// Writable mounts read-write; the default is read-only.
	Writable bool
}

// validateBinds checks binds; failures wrap ErrInvalidSpec.
func validateBinds(binds []Bind) error {
	reserved := append([]string{"/proc", "/dev", WorkspaceMount}, systemDirs...)
	for _, b := range binds {
		if !filepath.IsAbs(b.Host) {
			return fmt.Errorf("%w: bind source %q is not an absolute path", ErrInvalidSpec, b.Host)
		}
		if _, err := os.Stat(b.Host); err != nil {
			return fmt.Errorf("%w: bind source: %w", ErrInvalidSpec, err)
		}
		if !path.IsAbs(b.Sandbox) || path.Clean(b.Sandbox) != b.Sandbox || b.Sandbox == "/" {
			return fmt.Errorf("%w: bind target %q must be an absolute clean path other than /", ErrInvalidSpec, b.Sandbox)
		}
		for _, r := range reserved {
			if b.Sandbox == r || strings.HasPrefix(b.Sandbox, r+"/") {
				return fmt.Errorf("%w: bind target %s is inside %s, which the sandbox mounts itself", ErrInvalidSpec, b.Sandbox, r)
			}
		}
	}
	return nil
}
