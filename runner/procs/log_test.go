package procs

import (
	"runtime"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// checkProcLog checks what a log keeps: within its bounds, contiguous, and equal to the tail of what was
// written (want: the whole output, as written).
func checkProcLog(t *testing.T, l *procLog, want string) {
	t.Helper()
	chunks, next, _, _ := l.since(0)
	start, end := l.bounds()
	if end != int64(len(want)) || next != end || end-start > l.max || len(l.chunks) > l.maxChunks {
		t.Fatalf("kept [%d,%d) of %d bytes in %d chunks (max %d bytes, %d chunks)", start, end, len(want), len(l.chunks), l.max, l.maxChunks)
	}
	off := start
	for _, c := range chunks {
		if c.Offset != off || c.Data != want[off:off+int64(len(c.Data))] {
			t.Fatalf("chunk at %d (expected %d): %.20q", c.Offset, off, c.Data)
		}
		off += int64(len(c.Data))
	}
	if off != end {
		t.Fatalf("chunks end at %d, log at %d", off, end)
	}
}

// A process writing one byte at a time to stdout and stderr in turn makes one chunk per byte: the log
// bounds the chunks as well as the bytes, so the runner's memory (and every logs answer) stays bounded.
func TestProcLogBoundsTinyChunks(t *testing.T) {
	const size = 1 << 18
	l := newProcLog(size)
	var all strings.Builder
	for i := range 2 * size {
		stream, b := wire.EventStdout, "o"
		if i%2 == 1 {
			stream, b = wire.EventStderr, "e"
		}
		l.write(stream, b)
		all.WriteString(b)
	}
	if max := size / procChunkCost; len(l.chunks) > max {
		t.Fatalf("%d chunks kept for %d bytes (at most %d)", len(l.chunks), size, max)
	}
	checkProcLog(t, l, all.String())
}

// Small writes to one stream are kept as few chunks, so ordinary line-by-line output keeps its whole byte
// budget.
func TestProcLogMergesOneStream(t *testing.T) {
	l := newProcLog(1 << 16)
	var all strings.Builder
	for i := range 20000 {
		line := strings.Repeat("x", i%7) + "\n"
		l.write(wire.EventStdout, line)
		all.WriteString(line)
	}
	if start, end := l.bounds(); end-start < l.max-procMergeBytes {
		t.Fatalf("kept %d bytes of a %d byte budget", end-start, l.max)
	}
	checkProcLog(t, l, all.String())
}

// Dropped chunks release their text: a log whose chunk array grew with many small chunks, then written in
// large chunks, holds about its byte bound, not every large chunk that went through the array.
func TestProcLogReleasesDroppedText(t *testing.T) {
	const size = 8 << 10
	l := newProcLog(size)
	for i := range 4 * size {
		l.write([]string{wire.EventStdout, wire.EventStderr}[i%2], "x")
	}
	big := strings.Repeat("y", 32<<10)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := int64(ms.HeapAlloc)
	for i := range 1024 {
		l.write(wire.EventStdout, big[:len(big)-1]+string(rune('a'+i%26))) // a new string each time
		l.write(wire.EventStderr, "z")                                     // the next big one is not merged
		if i%128 == 127 {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			if grown := int64(ms.HeapAlloc) - before; grown > 8<<20 {
				t.Fatalf("the heap grew by %d MiB after %d chunks of 32 KiB through a log of %d KiB", grown>>20, i+1, size>>10)
			}
		}
	}
	runtime.KeepAlive(l)
}
