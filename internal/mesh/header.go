package mesh

import (
	"encoding/binary"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// Kind says what a stream carries; the accepting edge dispatches on it.
type Kind string

// The kinds a stream may carry. Any other kind is refused with ErrKind.
const (
	KindWebSocket Kind = "ws"   // a forwarded client WebSocket connection
	KindHTTP      Kind = "http" // a forwarded HTTP request and its response
	// KindRequests carries forwarded HTTP requests one after the other, each framed by the caller with an
	// identity of its own: the header's request id, issuer and user are empty, and the stream is reused.
	KindRequests Kind = "requests"
)

// kindCodes are the kinds' codes on the wire. A kind is added here and to Header docs together.
var kindCodes = []Kind{1: KindWebSocket, 2: KindHTTP, 3: KindRequests}

// HeaderVersion is the preamble version this package writes and the only one it reads.
const HeaderVersion = 1

// MaxFieldLen bounds each string field of a Header, in bytes; MaxHeaderLen bounds a whole encoded preamble.
const (
	MaxFieldLen  = 255
	MaxHeaderLen = 2 + 3*(1+MaxFieldLen) + 8
)

// Header is the preamble every stream starts with, written by Node.Open and parsed before the Handler runs.
// Its string fields are optional, at most MaxFieldLen bytes of UTF-8 without control characters each.
//
// Encoding (version 1), MaxHeaderLen bytes at most:
//
//	version  u8 (= 1)
//	kind     u8 (1 = ws, 2 = http, 3 = requests)
//	request  u8 length, bytes
//	issuer   u8 length, bytes
//	user     u8 length, bytes
//	epoch    u64 big endian
//
// The reader reads exactly these bytes and no more, so the stream's data starts right after them.
type Header struct {
	Kind      Kind
	RequestID string // the edge's request id, for logs across regions
	Issuer    string // the token issuer (tenant) the connection is admitted for
	User      string // the end user
	Epoch     uint64 // the placement epoch the forwarding edge saw
}

// Validate reports whether h can be sent: a known kind and bounded, printable fields. The error wraps ErrKind
// or ErrHeader.
func (h Header) Validate() error {
	if kindCode(h.Kind) == 0 {
		return fmt.Errorf("%w: %q", ErrKind, truncate(string(h.Kind)))
	}
	for _, f := range []struct{ name, v string }{{"request id", h.RequestID}, {"issuer", h.Issuer}, {"user", h.User}} {
		if err := validField(f.v); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrHeader, f.name, err)
		}
	}
	return nil
}

// AppendHeader appends h's encoding to b. It fails, appending nothing, when h is not valid.
func AppendHeader(b []byte, h Header) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return b, err
	}
	b = append(b, HeaderVersion, kindCode(h.Kind))
	for _, f := range []string{h.RequestID, h.Issuer, h.User} {
		b = append(b, byte(len(f)))
		b = append(b, f...)
	}
	return binary.BigEndian.AppendUint64(b, h.Epoch), nil
}

// ReadHeader reads one preamble from r, reading no byte past it. A preamble of another version is ErrVersion,
// one of an unknown kind ErrKind, anything else malformed ErrHeader (a stream that ends early too); errors
// from r that are not io.EOF or io.ErrUnexpectedEOF are returned wrapped as they are.
func ReadHeader(r io.Reader) (Header, error) {
	var buf [MaxFieldLen]byte
	if err := readFull(r, buf[:2]); err != nil {
		return Header{}, err
	}
	if buf[0] != HeaderVersion {
		return Header{}, fmt.Errorf("%w: %d", ErrVersion, buf[0])
	}
	var h Header
	if int(buf[1]) >= len(kindCodes) || kindCodes[buf[1]] == "" {
		return Header{}, fmt.Errorf("%w: code %d", ErrKind, buf[1])
	}
	h.Kind = kindCodes[buf[1]]
	for _, f := range []*string{&h.RequestID, &h.Issuer, &h.User} {
		if err := readFull(r, buf[:1]); err != nil {
			return Header{}, err
		}
		n := int(buf[0])
		if err := readFull(r, buf[:n]); err != nil {
			return Header{}, err
		}
		if err := validField(string(buf[:n])); err != nil {
			return Header{}, fmt.Errorf("%w: %v", ErrHeader, err)
		}
		*f = string(buf[:n])
	}
	if err := readFull(r, buf[:8]); err != nil {
		return Header{}, err
	}
	h.Epoch = binary.BigEndian.Uint64(buf[:8])
	return h, nil
}

func readFull(r io.Reader, b []byte) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("%w: truncated", ErrHeader)
		}
		return fmt.Errorf("read stream header: %w", err)
	}
	return nil
}

func kindCode(k Kind) byte {
	for i, c := range kindCodes {
		if c != "" && c == k {
			return byte(i)
		}
	}
	return 0
}

func validField(s string) error {
	if len(s) > MaxFieldLen {
		return fmt.Errorf("%d bytes, more than %d", len(s), MaxFieldLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("not UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U", r)
		}
	}
	return nil
}

// truncate bounds a peer- or caller-supplied string quoted in an error.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
