package edge

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/mesh"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// The framing of a forwarded stream after its mesh.Header (docs/PROTOCOL.md#mesh-streams). Every length is a
// u32 big endian and bounded before anything is allocated; a frame out of bounds or malformed is
// errBadFrame and the stream is aborted.
//
//	grant     version u8 (= grantVersion), length u32 (1..maxGrantFrame), JSON wire.Grant
//	ws        then messages both ways: type u8 (1 text, 2 binary, 8 close), length u32, payload
//	          (close: code u16 then the reason, at most 123 bytes of UTF-8)
//	http      then a request head: length u32 (1..maxHeadFrame), JSON {method, path, header, contentLength},
//	          the request body up to the opener's half-close; back a response head: length u32, JSON
//	          {status, header}, and the response body up to the end of the stream (a reset: cut short)
const (
	grantVersion  = 1
	maxGrantFrame = 64 << 10
	maxHeadFrame  = 64 << 10
	maxWSPayload  = wire.MaxFrame + 64 // a runner's message: the client's bound plus the seq it adds
	wsText        = 1
	wsBinary      = 2
	wsClose       = 8
)

var errBadFrame = errors.New("malformed mesh stream frame")

func badFrame(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadFrame, fmt.Sprintf(format, args...))
}

// appendGrant appends g's frame to b.
func appendGrant(b []byte, g wire.Grant) ([]byte, error) {
	j, err := json.Marshal(g)
	if err != nil {
		return b, err
	}
	if len(j) > maxGrantFrame {
		return b, badFrame("grant of %d bytes, more than %d", len(j), maxGrantFrame)
	}
	b = append(b, grantVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(j)))
	return append(b, j...), nil
}

// readGrant reads a grant frame from r, reading no byte past it, and checks it against the stream's header:
// the same issuer and user, a known window, bounded names. Errors wrap errBadFrame (or are r's).
func readGrant(r io.Reader, h mesh.Header) (wire.Grant, error) {
	var hdr [5]byte
	if err := readFrame(r, hdr[:]); err != nil {
		return wire.Grant{}, err
	}
	if hdr[0] != grantVersion {
		return wire.Grant{}, badFrame("grant version %d", hdr[0])
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n == 0 || n > maxGrantFrame {
		return wire.Grant{}, badFrame("grant of %d bytes", n)
	}
	b := make([]byte, n)
	if err := readFrame(r, b); err != nil {
		return wire.Grant{}, err
	}
	var g wire.Grant
	if err := decodeStrictJSON(b, &g); err != nil {
		return wire.Grant{}, badFrame("grant: %v", err)
	}
	switch {
	case g.Issuer == "" || g.User == "" || len(g.Issuer) > mesh.MaxFieldLen || len(g.User) > mesh.MaxFieldLen:
		return wire.Grant{}, badFrame("grant without issuer or user")
	case g.Issuer != h.Issuer || g.User != h.User:
		return wire.Grant{}, badFrame("grant for another user than the stream's")
	case !billing.Window(g.Window).Valid():
		return wire.Grant{}, badFrame("grant window %q", truncateStr(g.Window))
	}
	return g, nil
}

// appendWS appends one message frame to b (typ wsText or wsBinary).
func appendWS(b []byte, typ byte, data []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// appendWSClose appends a close frame: code and reason (cut to wire.MaxCloseReason bytes of whole runes).
func appendWSClose(b []byte, code websocket.StatusCode, reason string) []byte {
	for len(reason) > wire.MaxCloseReason {
		_, size := utf8.DecodeLastRuneInString(reason)
		reason = reason[:len(reason)-size]
	}
	b = append(b, wsClose)
	b = binary.BigEndian.AppendUint32(b, uint32(2+len(reason)))
	b = binary.BigEndian.AppendUint16(b, uint16(code))
	return append(b, reason...)
}

// readWS reads one message frame from r. A close frame is returned as a websocket.CloseError, so callers
// treat it as a WebSocket peer's close.
func readWS(r io.Reader) (websocket.MessageType, []byte, error) {
	var hdr [5]byte
	if err := readFrame(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	switch hdr[0] {
	case wsText, wsBinary:
		if n > maxWSPayload {
			return 0, nil, badFrame("message of %d bytes, more than %d", n, maxWSPayload)
		}
	case wsClose:
		if n < 2 || n > 2+wire.MaxCloseReason {
			return 0, nil, badFrame("close frame of %d bytes", n)
		}
	default:
		return 0, nil, badFrame("message type %d", hdr[0])
	}
	b := make([]byte, n)
	if err := readFrame(r, b); err != nil {
		return 0, nil, err
	}
	switch hdr[0] {
	case wsText:
		return websocket.MessageText, b, nil
	case wsBinary:
		return websocket.MessageBinary, b, nil
	}
	code := websocket.StatusCode(binary.BigEndian.Uint16(b))
	reason := string(b[2:])
	if !sendableCloseCode(code) || !utf8.ValidString(reason) {
		return 0, nil, badFrame("close code %d or its reason", code)
	}
	return 0, nil, websocket.CloseError{Code: code, Reason: reason}
}

// sendableCloseCode reports whether code may be sent in a WebSocket close frame (RFC 6455 §7.4).
func sendableCloseCode(code websocket.StatusCode) bool {
	switch {
	case code >= 3000 && code <= 4999:
		return true
	case code < 1000 || code > 1014:
		return false
	}
	return code != 1004 && code != 1005 && code != 1006
}

// reqHead is a forwarded request's head.
type reqHead struct {
	Method        string      `json:"method"`
	Path          string      `json:"path"` // path and query, under /v1/sandbox/ or /v1/sessions (relayedPath), or /v1/preview/ (previewPath)
	Header        http.Header `json:"header"`
	ContentLength int64       `json:"contentLength"` // -1: unknown, the body ends at the half-close
}

// respHead is a forwarded response's head.
type respHead struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
}

// appendHead appends a head frame holding v (reqHead or respHead).
func appendHead(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	if len(j) > maxHeadFrame {
		return b, badFrame("head of %d bytes, more than %d", len(j), maxHeadFrame)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(j)))
	return append(b, j...), nil
}

// readHeadFrame reads a head frame's length and bytes (1 to maxHeadFrame).
func readHeadFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if err := readFrame(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxHeadFrame {
		return nil, badFrame("head of %d bytes", n)
	}
	b := make([]byte, n)
	if err := readFrame(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// readHead reads a head frame into v and checks it.
func readHead(r io.Reader, v interface{ check() error }) error {
	b, err := readHeadFrame(r)
	if err != nil {
		return err
	}
	if err := decodeStrictJSON(b, v); err != nil {
		return badFrame("head: %v", err)
	}
	return v.check()
}

func (h *reqHead) check() error {
	switch {
	case !validMethod(h.Method):
		return badFrame("method %q", truncateStr(h.Method))
	case !relayedPath(h.Path) && !previewPath(h.Path) || strings.ContainsFunc(h.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return badFrame("path %q", truncateStr(h.Path))
	case h.ContentLength < -1:
		return badFrame("content length %d", h.ContentLength)
	}
	return checkHeader(h.Header)
}

func (h *respHead) check() error {
	// 101 answers a forwarded upgrade (relayUpgrade); other informational answers are not forwarded.
	if (h.Status < 200 && h.Status != http.StatusSwitchingProtocols) || h.Status > 599 {
		return badFrame("status %d", h.Status)
	}
	return checkHeader(h.Header)
}

func checkHeader(h http.Header) error {
	for k, vs := range h {
		if k == "" || strings.ContainsFunc(k, notTokenRune) || k != http.CanonicalHeaderKey(k) {
			return badFrame("header name %q", truncateStr(k))
		}
		for _, v := range vs {
			if strings.ContainsFunc(v, func(r rune) bool { return r == '\r' || r == '\n' || r == 0 }) {
				return badFrame("header %s's value", k)
			}
		}
	}
	return nil
}

// notTokenRune reports whether r cannot be in an HTTP token (RFC 9110 §5.6.2).
func notTokenRune(r rune) bool {
	return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
}

func validMethod(m string) bool {
	return m != "" && len(m) <= 16 && !strings.ContainsFunc(m, func(r rune) bool { return r < 'A' || r > 'Z' })
}

func decodeStrictJSON(b []byte, v any) error {
	return strictjson.Unmarshal(b, v, strictjson.RejectUnknown)
}

// readFrame reads exactly len(b) bytes; a stream that ends early is errBadFrame.
func readFrame(r io.Reader, b []byte) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return badFrame("truncated")
		}
		return err
	}
	return nil
}

func truncateStr(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// An exchange's heads (meshpool.go) are binary, not JSON, being on the path of every forwarded request:
//
//	request   length u32 (1..maxHeadFrame), then method u8 length and bytes, path u16 length and bytes,
//	          content length u64 (two's complement: -1 unknown), fields
//	response  length u32 (1..maxHeadFrame), then status u16, fields
//	fields    count u16, then each: name u16 length and bytes, value u16 length and bytes (a name with
//	          several values once per value)
//
// The frame's bytes are exactly these; they are checked as a JSON head is (check).

// appendExchangeHead appends v's frame (reqHead or respHead) in an exchange's form.
func appendExchangeHead(b []byte, v any) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	var h http.Header
	switch v := v.(type) {
	case reqHead:
		if len(v.Method) > 0xff || len(v.Path) > 0xffff {
			return b[:start], badFrame("method or path too long")
		}
		b = append(append(b, byte(len(v.Method))), v.Method...)
		b = append(binary.BigEndian.AppendUint16(b, uint16(len(v.Path))), v.Path...)
		b = binary.BigEndian.AppendUint64(b, uint64(v.ContentLength))
		h = v.Header
	case respHead:
		b = binary.BigEndian.AppendUint16(b, uint16(v.Status))
		h = v.Header
	default:
		return b[:start], fmt.Errorf("no exchange head for %T", v)
	}
	count := 0
	for _, vs := range h {
		count += len(vs)
	}
	if count > 0xffff {
		return b[:start], badFrame("%d header fields", count)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(count))
	for k, vs := range h {
		for _, v := range vs {
			if len(k) > 0xffff || len(v) > 0xffff {
				return b[:start], badFrame("header %s too long", truncateStr(k))
			}
			b = append(binary.BigEndian.AppendUint16(b, uint16(len(k))), k...)
			b = append(binary.BigEndian.AppendUint16(b, uint16(len(v))), v...)
		}
	}
	n := len(b) - start - 4
	if n > maxHeadFrame {
		return b[:start], badFrame("head of %d bytes, more than %d", n, maxHeadFrame)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// readExchangeHead reads an exchange's head frame into v (*reqHead or *respHead) and checks it.
func readExchangeHead(r io.Reader, v interface{ check() error }) error {
	b, err := readHeadFrame(r)
	if err != nil {
		return err
	}
	br := binReader{b: b}
	var h *http.Header
	switch v := v.(type) {
	case *reqHead:
		v.Method = string(br.next(int(br.u8())))
		v.Path = string(br.next(int(br.u16())))
		v.ContentLength = int64(br.u64())
		h = &v.Header
	case *respHead:
		v.Status = int(br.u16())
		h = &v.Header
	default:
		return fmt.Errorf("no exchange head for %T", v)
	}
	count := int(br.u16())
	if count > len(br.b)/4 { // each field takes 4 bytes at least
		return badFrame("%d header fields in %d bytes", count, len(br.b))
	}
	*h = make(http.Header, count)
	for range count {
		k := string(br.next(int(br.u16())))
		val := string(br.next(int(br.u16())))
		if br.bad {
			break
		}
		(*h)[k] = append((*h)[k], val)
	}
	switch {
	case br.bad:
		return badFrame("head truncated")
	case len(br.b) > 0:
		return badFrame("%d bytes after the head", len(br.b))
	}
	return v.check()
}

// binReader reads big-endian fields off b; bad once a read went past its end (reads then give zeros).
type binReader struct {
	b   []byte
	bad bool
}

func (r *binReader) next(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *binReader) u8() uint8 {
	if p := r.next(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *binReader) u16() uint16 {
	if p := r.next(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (r *binReader) u64() uint64 {
	if p := r.next(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}
