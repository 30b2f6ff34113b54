package edge

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// A reverse proxy's error is a warning while its client is there, and debug once the client has left
// (before, "ReverseProxy read error during body copy" was a WARN for every interrupted `proc logs -f`).
func TestProxyErrorLogClientGone(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level})
		ctx, cancel := context.WithCancel(context.Background())
		l := proxyErrorLog(ctx, h)
		l.Print("broken while there")
		cancel()
		l.Print("broken after leaving")
		out := buf.String()
		if !strings.Contains(out, `level=WARN msg="broken while there"`) {
			t.Errorf("level %v: the client still there is not a warning: %q", level, out)
		}
		gone := strings.Contains(out, "broken after leaving")
		if strings.Contains(out, `level=WARN msg="broken after leaving"`) || gone != (level == slog.LevelDebug) ||
			(gone && !strings.Contains(out, `level=DEBUG msg="broken after leaving"`)) {
			t.Errorf("level %v: the client gone: %q", level, out)
		}
	}
}
