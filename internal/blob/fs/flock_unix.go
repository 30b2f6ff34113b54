//go:build unix

package fs

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// flock takes an exclusive flock on f, waiting until it is free or ctx ends. It polls with a non-blocking
// flock because a blocking one cannot be cancelled; the lock is only ever held for a compare and a rename.
func flock(ctx context.Context, f *os.File) error {
	wait := 50 * time.Microsecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }
