package isolate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// WorkspaceMount is where the workspace appears inside the sandbox; commands start there and HOME points
// there.
const WorkspaceMount = "/workspace"

// Hostname is the sandbox's hostname (UTS namespace).
const Hostname = "warren"

// systemDirs are the host paths made visible, read-only, inside the sandbox. Anything else of the host
// (data dirs, the runner's state dir, other users' workspaces, /home, /root, /var, /run, /srv, /mnt, /sys)
// is absent, and /etc is a minimal one of the sandbox's own.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// systemMounts returns the bwrap arguments that reproduce the system directories found under hostRoot ("/"
// outside tests). A directory is bind-mounted read-only; a symlink (usrmerge: /bin -> usr/bin) is recreated
// as the same symlink, so it resolves inside the read-only /usr; a missing entry is skipped. /etc is not
// among them: the sandbox gets a minimal one (etcMounts, etcFiles).
func systemMounts(hostRoot string) ([]string, error) {
	var args []string
	for _, d := range systemDirs {
		a, err := mirror(filepath.Join(hostRoot, d), d, true)
		if err != nil {
			return nil, err
		}
		args = append(args, a...)
	}
	return args, nil
}

// mirror returns the bwrap arguments that show host at dest read-only: the same symlink for a symlink,
// a read-only bind otherwise (only of a directory when dirsOnly), nothing when host is missing.
func mirror(host, dest string, dirsOnly bool) ([]string, error) {
	fi, err := os.Lstat(host)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("inspect %s: %w", host, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(host)
		if err != nil {
			return nil, fmt.Errorf("read link %s: %w", host, err)
		}
		return []string{"--symlink", target, dest}, nil
	case dirsOnly && !fi.IsDir():
		return nil, nil
	}
	return []string{"--ro-bind", host, dest}, nil
}

// boxLayout is what a bubblewrap command line is made of besides the command: the host's system mounts
// and /etc entries (systemMounts, etcMounts plus --ro-bind-data of the made files), bwrap's info pipe and
// the seccomp filter (fds the command inherits), the workspace, the binds and the size of /tmp.
type boxLayout struct {
	mounts, etc   []string
	info, seccomp int
	workspace     string
	binds         []Bind
	tmpBytes      int64
	envFd         int // > 0: the environment's --setenv options come from this fd (--args), not env
}

// bwrapArgs is the bubblewrap command line (after the program name) running inner in dir (relative to the
// workspace) with exactly env.
//
//   - a user namespace whose only user is the sandbox's (SandboxUID), mapped to the unprivileged host uid
//     bwrap runs as: nobody inside is host root, and --disable-userns stops the sandbox from making a
//     namespace in which it would hold capabilities again;
//   - new PID, IPC, UTS, cgroup and (unless hostNet) network namespaces; the network namespace is the
//     sandbox's own (Network), which bwrap inherits from nsenter, so --unshare-net is not given;
//   - --die-with-parent: if the runner or the outer bwrap dies, the sandbox's init dies and the kernel kills
//     every process in the PID namespace, so a kill of the outer bwrap reaches the whole tree;
//   - --new-session: no controlling terminal to inject input into (TIOCSTI);
//   - --cap-drop ALL and a seccomp filter (seccompFilter) refusing mount, bpf, keyctl, kexec, modules,
//     perf, io_uring and the like;
//   - system dirs read-only, a minimal /etc (etcFiles, etcAllowed), a fresh /proc with /proc/sys
//     read-only, a minimal /dev, a private sized /tmp per command, the workspace read-write at
//     /workspace, nothing else; the sandbox's own root is remounted read-only so /tmp and /workspace are
//     the only writable places;
//   - --clearenv: only env is set.
//
// binds (already validated) are mounted after the workspace, before the root is remounted read-only; a
// bind keeps its own read-only or read-write flag.
func bwrapArgs(l boxLayout, dir string, env, inner []string) []string {
	a := []string{
		"--info-fd", strconv.Itoa(l.info), // the sandbox's init pid, see boxCmd
		"--unshare-user", "--uid", strconv.Itoa(SandboxUID), "--gid", strconv.Itoa(SandboxGID), "--disable-userns",
		"--die-with-parent", "--new-session",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", Hostname,
		"--cap-drop", "ALL",
		"--seccomp", strconv.Itoa(l.seccomp),
	}
	a = append(a, l.mounts...)
	a = append(a, "--tmpfs", "/etc")
	a = append(a, l.etc...)
	a = append(a, "--remount-ro", "/etc")
	a = append(a, "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind", "/dev/null", "/proc/cmdline", "--dev", "/dev")
	if l.tmpBytes > 0 {
		a = append(a, "--size", strconv.FormatInt(l.tmpBytes, 10))
	}
	// /dev itself is a tmpfs: read-only once /dev/shm is mounted, so it is no unbounded scratch space.
	a = append(a, "--tmpfs", "/dev/shm", "--remount-ro", "/dev")
	if l.tmpBytes > 0 {
		a = append(a, "--size", strconv.FormatInt(l.tmpBytes, 10))
	}
	a = append(a, "--tmpfs", "/tmp", "--bind", l.workspace, WorkspaceMount)
	for _, b := range l.binds {
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
	if l.envFd > 0 {
		a = append(a, "--args", strconv.Itoa(l.envFd))
	} else {
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			a = append(a, "--setenv", k, v)
		}
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
	reserved := append([]string{"/proc", "/dev", "/etc", WorkspaceMount}, systemDirs...)
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
