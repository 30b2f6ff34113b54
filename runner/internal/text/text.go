// Package text converts program output, bytes read in arbitrary chunks, to the valid UTF-8 the wire's JSON
// strings carry: each run of bytes that is not valid UTF-8 becomes one U+FFFD (strings.ToValidUTF8), and a
// multi-byte character split across reads is reassembled before conversion, never replaced.
package text

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// Capped keeps the first Max bytes written and records that more was discarded. Writes never fail, so
// the command is never blocked or killed by the cap. One writer at a time; read after the writer ends.
type Capped struct {
	Max       int64
	buf       []byte
	truncated bool
}

func (b *Capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.Max - int64(len(b.buf)); int64(n) > room {
		b.truncated = true
		p = p[:max(room, 0)]
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// Bytes is what was kept; Truncated reports whether more was written.
func (b *Capped) Bytes() []byte   { return b.buf }
func (b *Capped) Truncated() bool { return b.truncated }

// String is the kept output as valid UTF-8; a character cut in half by the cap is dropped.
func (b *Capped) String() string {
	out := b.buf
	if b.truncated {
		out = out[:CompletePrefix(out)]
	}
	return strings.ToValidUTF8(string(out), "\uFFFD")
}

// Truncate cuts s to at most n bytes without splitting a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// CompletePrefix is the length of p without a trailing incomplete (but so far valid) UTF-8 sequence.
func CompletePrefix(p []byte) int {
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

// Stream converts one output stream, read in arbitrary chunks, to valid UTF-8 text. The zero value is
// ready; one reader at a time.
type Stream struct{ pending []byte }

// Next returns the text of what is held back plus p up to the last complete character and keeps the rest.
func (u *Stream) Next(p []byte) string {
	data := append(u.pending, p...)
	cut := CompletePrefix(data)
	u.pending = bytes.Clone(data[cut:])
	return strings.ToValidUTF8(string(data[:cut]), "\uFFFD")
}

// Flush returns whatever is held back (an incomplete character becomes U+FFFD).
func (u *Stream) Flush() string {
	s := strings.ToValidUTF8(string(u.pending), "\uFFFD")
	u.pending = nil
	return s
}
