package runner

import (
	"bytes"
	"context"
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
		out = out[:completePrefix(out)]
	}
	return strings.ToValidUTF8(string(out), "\uFFFD")
}

// completePrefix is the length of p without a trailing incomplete (but so far valid) UTF-8 sequence.
func completePrefix(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return i
			}
			break
		}
	}
	return len(p)
}

// utf8Stream converts one output stream, read in arbitrary chunks, to valid UTF-8 text.
type utf8Stream struct{ pending []byte }

// next returns the text of pending+p up to the last complete character and keeps the rest.
func (u *utf8Stream) next(p []byte) string {
	data := append(u.pending, p...)
	cut := completePrefix(data)
	u.pending = bytes.Clone(data[cut:])
	return strings.ToValidUTF8(string(data[:cut]), "\uFFFD")
}

// flush returns whatever is held back (an incomplete character becomes U+FFFD).
func (u *utf8Stream) flush() string {
	s := strings.ToValidUTF8(string(u.pending), "\uFFFD")
	u.pending = nil
	return s
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
