// Package text converts program output, bytes read in arbitrary chunks, to the valid UTF-8 the wire's JSON
// strings carry: each run of bytes that is not valid UTF-8 becomes one U+FFFD (strings.ToValidUTF8), and a
// multi-byte character split across reads is reassembled before conversion, never replaced.
package text

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

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
