// Package wtconn carries the agent channel over a WebTransport session (docs/PROTOCOL.md#webtransport): the
// session's one bidirectional stream holds the JSON messages, framed by wire.ReadStreamFrame, and the
// session's close carries the WebSocket close code and reason. Conn has the methods of a *websocket.Conn
// that the edge's relay and the SDK's session use, so both run unchanged over either transport.
package wtconn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/internal/wire"
)

// Session error codes beyond the WebSocket close codes, which are used as they are
// (docs/PROTOCOL.md#webtransport).
const (
	// CodeDefault is the code of a WebTransport close that names none (the browser's close()): a normal
	// closure, as 1000.
	CodeDefault = 0
	// CodeAbnormal closes a session without the close handshake (CloseNow): the peer sees the connection
	// lost, as a WebSocket that ends without a close frame (1006).
	CodeAbnormal = 1006
)

// Linger bounds how long Close waits for the peer to read what was sent and end its side before the
// session is closed (closing the session discards what the peer has not read yet).
const Linger = 2 * time.Second

// Role says which side of the channel a Conn is.
type Role int

const (
	// Server: the end of the client's side of the stream is its normal close (1000).
	Server Role = iota
	// Client: the end of the server's side of the stream announces the session's close; Read then ends
	// its own side and returns the code the session is closed with.
	Client
)

// Conn is one agent channel over a WebTransport session's stream. Read and Write may run concurrently with
// each other and with Close; reads are one at a time, writes are serialized.
type Conn struct {
	sess  *webtransport.Session
	str   *webtransport.Stream
	role  Role
	limit int

	rmu      sync.Mutex    // held by Read
	peerDone chan struct{} // closed when the peer's side of the stream has ended (or the session)
	peerOnce sync.Once
	peerEOF  atomic.Bool // the peer ended its side of the stream cleanly

	wmu       sync.Mutex
	buf       []byte
	closeOnce sync.Once

	// connect is the session's CONNECT stream (server side, SetConnectStream): Close writes the close
	// capsule on it itself.
	connect *http3.Stream
}

// SetConnectStream gives a server's Conn the session's CONNECT stream (the http3.HTTPStreamer's stream of
// the upgraded request), so that Close sends the close capsule and the FIN without the STOP_SENDING that
// webtransport-go's CloseWithError adds: Chromium takes a STOP_SENDING processed before the capsule for an
// aborted session and reports "Connection lost" (1006) instead of the code (docs/PROTOCOL.md#webtransport).
// Call it before any Close.
func (c *Conn) SetConnectStream(str *http3.Stream) { c.connect = str }

// wtCloseSessionCapsule is WT_CLOSE_SESSION's capsule type (draft-ietf-webtrans-http3).
const wtCloseSessionCapsule = 0x2843

// maxCloseReason bounds the reason in a close capsule (as webtransport-go does).
const maxCloseReason = 1024

// closeOnConnect writes the WT_CLOSE_SESSION capsule (code, reason) and the FIN on the CONNECT stream,
// then waits (at most Linger) for the peer to answer with its own FIN, which ends the session.
func (c *Conn) closeOnConnect(code webtransport.SessionErrorCode, reason string) {
	if len(reason) > maxCloseReason {
		n := maxCloseReason
		for n > 0 && !utf8.RuneStart(reason[n]) {
			n--
		}
		reason = reason[:n]
	}
	b := quicvarint.Append(nil, wtCloseSessionCapsule)
	b = quicvarint.Append(b, uint64(4+len(reason)))
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	b = append(b, reason...)
	if err := c.connect.TryWriteAll(b); err != nil {
		return // webtransport-go's close follows
	}
	_ = c.connect.Close()
	t := time.NewTimer(Linger)
	defer t.Stop()
	select {
	case <-c.sess.Context().Done():
	case <-t.C:
	}
}

// New is the channel over sess's stream str; messages read above limit bytes are refused
// (payload_too_large).
func New(sess *webtransport.Session, str *webtransport.Stream, role Role, limit int) *Conn {
	return &Conn{sess: sess, str: str, role: role, limit: limit, peerDone: make(chan struct{})}
}

// Session is the WebTransport session of c.
func (c *Conn) Session() *webtransport.Session { return c.sess }

// Read reads the next message (always websocket.MessageText). The peer's close is a websocket.CloseError
// with the session's code and reason (code 0: 1000); a session dropped without a close, or the connection
// lost, is another error. A malformed frame is a *wire.Error (payload_too_large, invalid_argument).
func (c *Conn) Read(ctx context.Context) (websocket.MessageType, []byte, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = c.str.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	msg, err := wire.ReadStreamFrame(c.str, c.limit)
	switch {
	case err == nil:
		return websocket.MessageText, msg, nil
	case errors.Is(err, wire.ErrFrameTooLarge):
		return 0, nil, wire.Wrap(wire.PayloadTooLarge, err, fmt.Sprintf("frame exceeds %d bytes", c.limit))
	case errors.Is(err, wire.ErrEmptyFrame):
		return 0, nil, wire.Wrap(wire.InvalidArgument, err, "empty frame: each frame holds one JSON message")
	case ctx.Err() != nil:
		return 0, nil, ctx.Err()
	}
	c.peerOnce.Do(func() { close(c.peerDone) })
	if err != io.EOF {
		return 0, nil, c.closeErr(err)
	}
	c.peerEOF.Store(true)
	if c.role == Server {
		return 0, nil, websocket.CloseError{Code: websocket.StatusNormalClosure}
	}
	// The server ended its side: it closes the session once ours has ended too (or after its Linger).
	c.wmu.Lock()
	_ = c.str.Close()
	c.wmu.Unlock()
	t := time.NewTimer(2 * Linger)
	defer t.Stop()
	select {
	case <-c.sess.Context().Done():
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case <-t.C:
		return 0, nil, fmt.Errorf("webtransport: the server ended its stream but did not close the session: %w", io.ErrUnexpectedEOF)
	}
	return 0, nil, c.closeErr(io.EOF)
}

// closeErr is the error of a read that failed with err: the session's close as a websocket.CloseError
// when the session was closed with a code, else err.
func (c *Conn) closeErr(err error) error {
	var ae *quic.ApplicationError
	if c.role == Server && errors.As(err, &ae) && ae.Remote && ae.ErrorCode == quic.ApplicationErrorCode(http3.ErrCodeNoError) {
		// The client closed its whole connection without an error: it may not have waited for its session
		// close to be read (a client's transport closes the connection with its session).
		return websocket.CloseError{Code: websocket.StatusNormalClosure}
	}
	var se *webtransport.SessionError
	if !errors.As(err, &se) {
		select {
		case <-c.sess.Context().Done():
			// A closed session answers OpenStream with the error it was closed with.
			if _, oerr := c.sess.OpenStream(); !errors.As(oerr, &se) {
				return err
			}
		default:
			return err
		}
	}
	switch se.ErrorCode {
	case CodeDefault:
		return websocket.CloseError{Code: websocket.StatusNormalClosure, Reason: se.Message}
	case CodeAbnormal:
		return fmt.Errorf("webtransport: session dropped (%s): %w", se.Message, io.ErrUnexpectedEOF)
	}
	return websocket.CloseError{Code: websocket.StatusCode(se.ErrorCode), Reason: se.Message}
}

// Write sends data as one frame. Binary messages are not part of the protocol and are refused.
func (c *Conn) Write(ctx context.Context, typ websocket.MessageType, data []byte) error {
	if typ != websocket.MessageText {
		return errors.New("webtransport: only text (JSON) messages are sent")
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = c.str.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	c.buf = wire.AppendStreamFrame(c.buf[:0], data)
	_, err := c.str.Write(c.buf)
	if cap(c.buf) > 64<<10 {
		c.buf = nil // keep no large message's buffer
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Close ends c's side of the stream after what was written, lets the peer read it and end its own side
// (bounded by Linger), then closes the session with code and reason. Calling it again, or CloseNow after
// it, does nothing.
func (c *Conn) Close(code websocket.StatusCode, reason string) error {
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		_ = c.str.Close()
		c.wmu.Unlock()
		t := time.NewTimer(Linger)
		defer t.Stop()
		if c.rmu.TryLock() {
			// No one reads: read (and drop) what the peer still sends until its side ends.
			go func() {
				defer c.rmu.Unlock()
				_ = c.str.SetReadDeadline(time.Now().Add(Linger))
				_, _ = io.Copy(io.Discard, c.str)
				c.peerOnce.Do(func() { close(c.peerDone) })
			}()
		}
		select {
		case <-c.peerDone:
		case <-c.sess.Context().Done():
		case <-t.C:
		}
		if c.connect != nil {
			c.closeOnConnect(webtransport.SessionErrorCode(code), reason)
		}
		_ = c.sess.CloseWithError(webtransport.SessionErrorCode(code), reason) // nothing if closed by now
	})
	return nil
}

// CloseNow closes the session at once with CodeAbnormal: the peer sees the connection lost. After the peer
// ended its side of the stream (its normal close), it closes with 1000 instead.
func (c *Conn) CloseNow() error {
	c.closeOnce.Do(func() {
		if c.peerEOF.Load() {
			c.wmu.Lock()
			_ = c.str.Close()
			c.wmu.Unlock()
			_ = c.sess.CloseWithError(webtransport.SessionErrorCode(websocket.StatusNormalClosure), "")
			return
		}
		c.str.CancelRead(0)
		c.str.CancelWrite(0)
		_ = c.sess.CloseWithError(CodeAbnormal, "")
	})
	return nil
}
