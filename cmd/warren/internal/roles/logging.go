package roles

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// newLogger is the slog logger every role uses: key=value text for a person when w is a terminal, JSON
// lines for a machine (a file, a pipe, a log collector) otherwise.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	if isTerminal(w) {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
