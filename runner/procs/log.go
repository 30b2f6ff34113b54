package procs

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/wire"
)

// procLog keeps the most recent output of a background process (stdout and stderr interleaved as read,
// converted to UTF-8): at most max bytes in at most maxChunks chunks, the oldest chunks dropped first.
// Offsets count every byte ever written, so a reader knows what it missed. Readers follow it through wake,
// which is closed and replaced on every write and on close.
//
// A chunk costs far more than its bytes (its record, and a JSON object in every answer), and the process
// chooses how small its writes are: a write continuing the last chunk's stream is appended to it (up to
// procMergeBytes), and the chunk count is bounded too, so a process writing one byte at a time to stdout
// and stderr in turn keeps less output, not more memory.
type procLog struct {
	mu        sync.Mutex
	max       int64
	maxChunks int
	chunks    []wire.ProcChunk
	start     int64 // offset of the first kept byte
	end       int64 // offset after the last byte
	closed    bool
	wake      chan struct{}
}

// procChunkCost is the budget of one chunk: the log of max bytes keeps at most max/procChunkCost chunks
// (at least procMinChunks).
const (
	procChunkCost  = 64
	procMinChunks  = 64
	procMergeBytes = 4096
)

func newProcLog(limit int64) *procLog {
	return &procLog{max: limit, maxChunks: int(max(limit/procChunkCost, procMinChunks)), wake: make(chan struct{})}
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
	if n := len(l.chunks); n > 0 && l.chunks[n-1].Stream == stream && len(l.chunks[n-1].Data)+len(text) <= procMergeBytes {
		l.chunks[n-1].Data += text // copies at most procMergeBytes
	} else {
		l.chunks = append(l.chunks, wire.ProcChunk{Stream: stream, Offset: l.end, Data: text})
	}
	l.end += int64(len(text))
	if len(l.chunks) > l.maxChunks {
		l.start = l.chunks[1].Offset
		l.dropFirst()
	}
	for l.end-l.start > l.max && len(l.chunks) > 0 {
		c := &l.chunks[0]
		over := l.end - l.start - l.max
		if over >= int64(len(c.Data)) {
			l.start += int64(len(c.Data))
			l.dropFirst()
			continue
		}
		cut := skipToRuneStart(c.Data, int(over))
		c.Data, c.Offset = c.Data[cut:], c.Offset+int64(cut)
		l.start = c.Offset
		if c.Data == "" {
			l.dropFirst()
		}
	}
	l.broadcast()
}

// dropFirst forgets the oldest chunk. Its slot is cleared: the array behind the slice keeps the slots
// before its start until append moves it, and a slot still holding its text would keep that text alive
// past the byte bound (a cap grown by many small chunks, then filled by large ones).
func (l *procLog) dropFirst() {
	l.chunks[0] = wire.ProcChunk{}
	l.chunks = l.chunks[1:]
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
