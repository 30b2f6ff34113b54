package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress wraps r, a transfer of size bytes (-1 unknown) called what, with a progress bar on stderr when
// stderr is a terminal: bytes moved, rate and, when the size is known, percent and time left. Elsewhere
// (a pipe, a file, a test) r comes back as it is. done clears the bar; call it once the transfer ends.
func progress(stderr io.Writer, r io.Reader, size int64, what string) (_ io.Reader, done func()) {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return r, func() {}
	}
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond), // at most ten redraws a second
		progressbar.OptionShowCount(),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetVisibility(true),
	)
	pr := progressbar.NewReader(r, bar)
	return &pr, func() { _ = bar.Finish() }
}
