package runner

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/wire"
)

// procLog keeps the most recent output of a background process (stdout and stderr interleaved as read,
// converted to UTF-8): at most max bytes, the oldest chunks dropped first. Offsets count every byte ever
// written, so a reader knows what it missed. Readers follow it through wake, which is closed and replaced
// on every write and on close.
type procLog struct {
	mu     sync.Mutex
	max    int64
	chunks []wire.ProcChunk
	start  int64 // offset of the first kept byte
	end    int64 // offset after the last byte
	closed bool
	wake   chan struct{}
}

func newProcLog(max int64) *procLog {
	return &procLog{max: max, wake: make(chan struct{})}
}

// write appends text of stream (a wire.EventStdout or wire.EventStderr).
func (l *procLog) write(stream, text string) {
	if text == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.chunks = append(l.chunks, wire.ProcChunk{Stream: stream, Offset: l.end, Data: text})
	l.end += int64(len(text))
	for l.end-l.start > l.max && len(l.chunks) > 0 {
		c := &l.chunks[0]
		over := l.end - l.start - l.max
		if over >= int64(len(c.Data)) {
			l.start += int64(len(c.Data))
			l.chunks = l.chunks[1:]
			continue
		}
		cut := skipToRuneStart(c.Data, int(over))
		c.Data, c.Offset = c.Data[cut:], c.Offset+int64(cut)
		l.start = c.Offset
		if c.Data == "" {
			l.chunks = l.chunks[1:]
		}
	}
	l.broadcast()
}

func (l *procLog) broadcast() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// close marks the end of the output (the process exited and its pipes are drained).
func (l *procLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.broadcast()
	}
}

// since returns copies of the kept chunks from offset off (from the first kept byte when off is older, cut
// at a character boundary when off falls inside one), the offset after them, whether the log is closed,
// and a channel closed on the next change.
func (l *procLog) since(off int64) (chunks []wire.ProcChunk, next int64, closed bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	off = max(off, l.start)
	for _, c := range l.chunks {
		cend := c.Offset + int64(len(c.Data))
		if cend <= off {
			continue
		}
		if c.Offset < off {
			cut := skipToRuneStart(c.Data, int(off-c.Offset))
			c.Data, c.Offset = c.Data[cut:], c.Offset+int64(cut)
		}
		if c.Data != "" {
			chunks = append(chunks, c)
		}
	}
	return chunks, max(off, l.end), l.closed, l.wake
}

// bounds returns the kept range.
func (l *procLog) bounds() (start, end int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start, l.end
}

// skipToRuneStart is the first index at or after i that starts a character (len(s) at most).
func skipToRuneStart(s string, i int) int {
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return min(i, len(s))
}

// lineMatcher finds the first line of a log that satisfies match. Lines end at "\n"; a line longer than
// wire.MaxProcLine is matched in pieces of that size, so memory stays bounded whatever the output.
type lineMatcher struct {
	match   func(string) bool
	partial strings.Builder
	lineOff int64 // offset of the partial line's first byte
}

// feed consumes a chunk and reports the first matching line and its offset.
func (m *lineMatcher) feed(c wire.ProcChunk) (string, int64, bool) {
	data, off := c.Data, c.Offset
	if m.partial.Len() == 0 {
		m.lineOff = off
	}
	for data != "" {
		i := strings.IndexByte(data, '\n')
		piece := data
		if i >= 0 {
			piece = data[:i]
		}
		room := wire.MaxProcLine - m.partial.Len()
		full := false
		if len(piece) >= room {
			piece = piece[:room]
			full = true
		}
		m.partial.WriteString(piece)
		consumed := len(piece)
		if !full && i >= 0 {
			consumed++ // the newline
		}
		if full || i >= 0 {
			if line, at, ok := m.endLine(); ok {
				return line, at, true
			}
			m.lineOff = off + int64(consumed)
		}
		data, off = data[consumed:], off+int64(consumed)
	}
	return "", 0, false
}

// flush matches what is left of an unterminated last line (the process has exited).
func (m *lineMatcher) flush() (string, int64, bool) {
	if m.partial.Len() == 0 {
		return "", 0, false
	}
	return m.endLine()
}

func (m *lineMatcher) endLine() (string, int64, bool) {
	line := m.partial.String()
	m.partial.Reset()
	return line, m.lineOff, m.match(line)
}
