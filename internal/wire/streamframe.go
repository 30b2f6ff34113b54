package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Stream framing of the agent channel over WebTransport (docs/PROTOCOL.md#transports): on the session's one
// bidirectional stream each message is a frame of a 4-byte big-endian length n (1 ≤ n ≤ the reader's
// limit) followed by n bytes, one JSON message in UTF-8. The same framing both ways.

// StreamFrameHeader is the size of a frame's length prefix.
const StreamFrameHeader = 4

// ErrFrameTooLarge is (wrapped in) the error of ReadStreamFrame for a frame above its limit: nothing of the
// frame's body was read.
var ErrFrameTooLarge = errors.New("frame too large")

// ErrEmptyFrame is the error of ReadStreamFrame for a frame of length 0, which the protocol does not allow.
var ErrEmptyFrame = errors.New("empty frame")

// AppendStreamFrame appends msg as one frame to b.
func AppendStreamFrame(b, msg []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
	return append(b, msg...)
}

// ReadStreamFrame reads one frame from r and returns its message; max bounds the message's size before
// anything of it is read, and the message's buffer grows only as its bytes arrive. io.EOF: the stream ended cleanly between frames; a stream that ends
// inside a frame is io.ErrUnexpectedEOF.
func ReadStreamFrame(r io.Reader, max int) ([]byte, error) {
	var h [StreamFrameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	switch {
	case n == 0:
		return nil, ErrEmptyFrame
	case uint64(n) > uint64(max):
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, n, max)
	}
	// Grown as the bytes arrive: a length alone, never followed by its body, allocates nothing much.
	msg, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, err
	}
	if len(msg) < int(n) {
		return nil, io.ErrUnexpectedEOF
	}
	return msg, nil
}
