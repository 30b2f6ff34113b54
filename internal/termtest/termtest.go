// Package termtest helps tests read what a terminal writes: it collects the output of a reader (a
// pseudo-terminal's master, an attached terminal connection) and waits for pieces of it.
package termtest

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// hangGuard bounds a wait so a broken terminal fails the test instead of hanging it; it is not a
// measure of speed.
const hangGuard = 60 * time.Second

// Screen is the output read so far, and a cursor past the last piece waited for.
type Screen struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	err    error
	more   chan struct{} // closed and replaced on every read
	done   chan struct{} // closed once the reader ended
	cursor int
}

// Watch reads r until it fails (io.EOF included) in a goroutine.
func Watch(r io.Reader) *Screen {
	s := &Screen{more: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		b := make([]byte, 32<<10)
		for {
			n, err := r.Read(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			if err != nil {
				s.err = err
			}
			close(s.more)
			s.more = make(chan struct{})
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

// ReaderFunc makes a read function an io.Reader.
type ReaderFunc func([]byte) (int, error)

func (f ReaderFunc) Read(b []byte) (int, error) { return f(b) }

// WaitFor waits until the output after the cursor contains want and moves the cursor past it. It fails the
// test when the reader ends first.
func (s *Screen) WaitFor(t testing.TB, want string) {
	t.Helper()
	deadline := time.After(hangGuard)
	for {
		s.mu.Lock()
		out, more, from := s.buf.String(), s.more, s.cursor
		if i := strings.Index(out[from:], want); i >= 0 {
			s.cursor = from + i + len(want)
			s.mu.Unlock()
			return
		}
		ended, err := s.ended()
		s.mu.Unlock()
		if ended {
			t.Fatalf("terminal output ended (%v) without %q; output:\n%s", err, want, out)
		}
		select {
		case <-more:
		case <-s.done:
		case <-deadline:
			t.Fatalf("no %q in the terminal's output:\n%s", want, out)
		}
	}
}

func (s *Screen) ended() (bool, error) {
	select {
	case <-s.done:
		return true, s.err
	default:
		return false, nil
	}
}

// Wait waits for the reader to end and returns its error.
func (s *Screen) Wait(t testing.TB) error {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(hangGuard):
		t.Fatalf("the terminal output did not end; output:\n%s", s.String())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// String is all the output read so far.
func (s *Screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Type writes s (keys, as a terminal would send them) to w.
func Type(t testing.TB, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatal(err)
	}
}
