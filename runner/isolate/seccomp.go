package isolate

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside the sandbox: the kernel's administrative and attack-surface
// interfaces that no coding workload needs. Most already need capabilities the sandbox lacks; the filter is
// the second wall for the day a kernel bug makes one of them reachable without. Namespace creation is
// refused by bubblewrap's --disable-userns (a new user namespace would give back capabilities); unshare and
// setns are denied here as well.
var deniedSyscalls = []string{
	// mounts and the root
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
	"fspick", "mount_setattr",
	// namespaces
	"unshare", "setns",
	// kernel and machine
	"reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
	"swapoff", "syslog", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm",
	"quotactl", "lookup_dcookie", "vhangup", "sethostname", "setdomainname",
	// kernel programs, keys and tracing of the kernel
	"bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
	// file handles (the classic container escape), io_uring (a large, often-patched surface)
	"open_by_handle_at", "name_to_handle_at", "io_uring_setup", "io_uring_enter", "io_uring_register",
}

// seccompFilter is the compiled filter bubblewrap installs (--seccomp FD) before it runs the command: an
// array of struct sock_filter in native byte order. A syscall of another ABI than the native one (i386
// through int 0x80, x32) kills the process, so the deny list cannot be sidestepped through a second
// syscall table.
func seccompFilter() ([]byte, error) {
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls:      []seccomp.SyscallGroup{{Action: seccomp.ActionErrno, Names: deniedSyscalls}},
	}
	prog, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp arch: %w", err)
	}
	// The library lets a foreign architecture through to the default action (allow); refuse it first.
	// Then socket() may only make Unix, IPv4, IPv6 and netlink sockets: the network filter sees nothing
	// else, and families such as AF_VSOCK reach the hypervisor of a virtual machine directly.
	head := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKET, SkipFalse: 7},
		bpf.LoadAbsolute{Off: 16, Size: 4}, // args[0], the family (an int)
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipTrue: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_INET, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_INET6, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_NETLINK, SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EAFNOSUPPORT)},
		bpf.RetConstant{Val: uint32(seccomp.ActionAllow)},
	}
	raw, err := bpf.Assemble(append(head, prog...))
	if err != nil {
		return nil, fmt.Errorf("seccomp assemble: %w", err)
	}
	if len(raw) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp filter has %d instructions, more than the kernel's %d", len(raw), unix.BPF_MAXINSNS)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}
