package isolate

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Host ids for sandboxes run by a root runner: each sandbox runs as its own unprivileged host uid (and gid
// of the same number) taken from [FirstHostUID, FirstHostUID+HostUIDCount), far above the ids of people
// and system services and below 2^31 so that tools reading ids as signed ints are not confused.
const (
	FirstHostUID = 2_000_000_000
	HostUIDCount = 100_000_000
)

// DefaultUIDDir holds the lock files of the host uids in use. It is on /run (a tmpfs), so a reboot frees
// them with the processes that held them.
const DefaultUIDDir = "/run/warren/sandbox-uids"

// UIDLease is one host uid held for one sandbox, by an exclusive lock on a file named after it; the lock
// (and the uid) are released by Release or when the process holding it ends.
type UIDLease struct {
	UID  uint32
	lock *os.File
}

// AllocateUID takes a host uid for the sandbox named key. It starts at a position derived from key, so a
// sandbox usually gets the same uid again (its workspace files keep their owner across restarts), and
// probes onwards past uids other live sandboxes of this host hold. dir is shared by every runner of the
// host (DefaultUIDDir outside tests).
func AllocateUID(dir, key string) (*UIDLease, error) {
	i, f, err := lockSlot(dir, key, HostUIDCount, func(i uint64) string { return strconv.FormatUint(FirstHostUID+i, 10) })
	if err != nil {
		return nil, fmt.Errorf("sandbox uid: %w", err)
	}
	return &UIDLease{UID: uint32(FirstHostUID + i), lock: f}, nil
}

// lockSlot takes one of count slots shared by every runner of the host, by an exclusive lock on a file
// in dir named by name: it starts at a position derived from key, so the same key usually gets the same
// slot again, and probes onwards (up to 4096 slots) past those other live runners hold. The lock (and the
// slot) are released when the file is closed or the process ends.
func lockSlot(dir, key string, count uint64, name func(uint64) string) (uint64, *os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, fmt.Errorf("%w: lock dir: %w", ErrConfig, err)
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	start := h.Sum64() % count
	for i := uint64(0); i < min(count, 4096); i++ {
		slot := (start + i) % count
		f, ok, err := tryLock(filepath.Join(dir, name(slot)))
		if err != nil {
			return 0, nil, err
		}
		if ok {
			return slot, f, nil
		}
	}
	return 0, nil, fmt.Errorf("%w: no free slot near the one of %q", ErrConfig, key)
}

// tryLock opens (creating it) and locks the file at path; ok is false when another holds it.
func tryLock(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("%w: lock: %w", ErrConfig, err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return f, true, nil
	}
	f.Close()
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("%w: lock %s: %w", ErrConfig, path, err)
}

// Release gives the uid back. It is idempotent.
func (l *UIDLease) Release() {
	if l != nil && l.lock != nil {
		// The file stays: removing it would let a process that opened it before the removal lock a dead inode
		// while another creates and locks a new file of the same name.
		l.lock.Close()
		l.lock = nil
	}
}

// Chown gives every entry under dir (dir included) to uid:gid where it has another owner, without
// following symlinks. The runner calls it on the workspace and the agent's home when it starts (after a
// restore, or when the sandbox got another uid), so the sandbox owns its files. The walk goes through
// os.Root: a directory a running sandbox swaps for a symlink meanwhile cannot lead it outside dir.
func Chown(dir string, uid, gid int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer root.Close()
	return chownIn(root, ".", uid, gid)
}

func chownIn(root *os.Root, rel string, uid, gid int) error {
	fi, err := root.Lstat(rel)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid || int(st.Gid) != gid {
		if err := root.Lchown(rel, uid, gid); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("chown %s: %w", rel, err)
		}
	}
	if !fi.IsDir() {
		return nil
	}
	d, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("open %s: %w", rel, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("list %s: %w", rel, err)
	}
	for _, n := range names {
		if err := chownIn(root, filepath.Join(rel, n), uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// MakeReachable lets every user traverse (never list) the directories above p, adding o+x where it is
// missing. bubblewrap runs as the sandbox's unprivileged host uid and resolves the paths it mounts (the
// workspace, the agent's home and CLI) as that uid, so their ancestors must be traversable; the entries
// themselves keep their modes (the workspace is the sandbox uid's, 0700).
func MakeReachable(p string) error {
	for dir := filepath.Dir(filepath.Clean(p)); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("%w: make %s traversable for the sandbox: %w", ErrConfig, dir, err)
			}
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}
