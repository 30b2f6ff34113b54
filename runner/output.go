package runner

import (
	"bytes"
	"context"
	"github.com/warren-mesh/warren/runner/internal/text"
	"strings"
	"unicode/utf8"
)

// Command output is bytes; the wire carries JSON strings. Output is therefore converted to valid UTF-8:
// each run of bytes that is not valid UTF-8 becomes one U+FFFD (strings.ToValidUTF8), and a multi-byte
// character split across reads is reassembled before conversion, never replaced.

// cappedBuffer keeps the first max bytes written and records that more was discarded. Writes never fail,
// so the command is never blocked or killed by the cap. One writer at a time; read after the writer ends.
type cappedBuffer struct {
	buf       []byte
	max       int64
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.max - int64(len(b.buf)); int64(n) > room {
		b.truncated = true
		p = p[:max(room, 0)]
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String is the kept output as valid UTF-8; a character cut in half by the cap is dropped.
func (b *cappedBuffer) String() string {
	out := b.buf
	if b.truncated {
		out = out[:text.CompletePrefix(out)]
	}
	return strings.ToValidUTF8(string(out), "\uFFFD")
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// chunk is one read of a streamed command's stdout or stderr.
type chunk struct {
	event string // wire.EventStdout or wire.EventStderr
	data  []byte
}

// chunkWriter hands each write to the streaming handler, blocking (and so back-pressuring the command)
// until the handler takes it or ctx ends.
type chunkWriter struct {
	ctx   context.Context
	event string
	ch    chan<- chunk
}

func (c chunkWriter) Write(p []byte) (int, error) {
	select {
	case c.ch <- chunk{event: c.event, data: bytes.Clone(p)}:
		return len(p), nil
	case <-c.ctx.Done():
		return 0, c.ctx.Err()
	}
}
