//go:build unix

package spool

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lock takes an exclusive flock on path (created if needed) without waiting: one Spool per file, across
// processes and within one. The lock lives in a file of its own because compaction renames a new spool
// file over the old one, and a lock on the old inode would no longer exclude anyone.
func lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
