package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
)

// streamCodeDone is what Close cancels the read side with: a graceful end, not counted as a reset by the
// peer.
const streamCodeDone = quic.StreamErrorCode(0x0)

// Stream is one mesh stream: a bidirectional byte stream to one peer edge, flow-controlled end to end (a
// Write blocks once the peer has not read a window's worth). It is a net.Conn. Read and Write may be called
// concurrently with each other and with Close, CloseWrite and Abort; Reads must not be concurrent with each
// other, nor Writes. Every Stream must be closed (the node closes the ones it hands to the Handler when it
// returns).
type Stream struct {
	qs     *quic.Stream
	conn   *quic.Conn
	peer   string
	header Header
	m      *metrics
	sent   prometheus.Counter
	recv   prometheus.Counter
	open   prometheus.Gauge

	wmu       sync.Mutex // serializes Write, CloseWrite and the graceful close of the send side
	wclosed   bool       // the send side is closed or cancelled (under wmu)
	closeOnce sync.Once
	aborted   atomic.Bool // the send side was reset: it must not be closed (quic-go forbids Close after CancelWrite)
	resetSeen atomic.Bool
}

var _ net.Conn = (*Stream)(nil)

func newStream(qs *quic.Stream, conn *quic.Conn, peer, dir string, h Header, m *metrics) *Stream {
	s := &Stream{
		qs: qs, conn: conn, peer: peer, header: h, m: m,
		sent: m.bytes.WithLabelValues(peer, "sent"),
		recv: m.bytes.WithLabelValues(peer, "received"),
		open: m.open.WithLabelValues(peer, dir),
	}
	s.open.Inc()
	return s
}

// Peer is the region of the edge at the other end, as its certificate proved.
func (s *Stream) Peer() string { return s.peer }

// Header is the preamble the stream was opened with.
func (s *Stream) Header() Header { return s.header }

// Context is cancelled once this side's sending half is done: closed here, or reset because the peer gave
// up reading (it aborted the stream). A handler uses it to stop work its peer no longer waits for.
func (s *Stream) Context() context.Context { return s.qs.Context() }

// Connection is cancelled once the connection the stream runs on has ended (the peer closed it, went
// silent, or this node closed): a stream kept for reuse is worth nothing after that.
func (s *Stream) Connection() context.Context { return s.conn.Context() }

// Read reads what the peer wrote; io.EOF once it closed its send side. An error wrapping ErrStreamReset
// means the peer aborted the stream.
func (s *Stream) Read(p []byte) (int, error) {
	n, err := s.qs.Read(p)
	if n > 0 {
		s.recv.Add(float64(n))
	}
	return n, s.streamErr(err)
}

// Write writes p, blocking while the peer's receive window is full: the bytes in flight on a stream never
// exceed the window the peer grants.
func (s *Stream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wclosed {
		return 0, fmt.Errorf("mesh stream write: %w", net.ErrClosed)
	}
	n, err := s.qs.Write(p)
	if n > 0 {
		s.sent.Add(float64(n))
	}
	return n, s.streamErr(err)
}

// CloseWrite closes the send side: the peer reads io.EOF after the data written so far. It waits for a
// Write in progress.
func (s *Stream) CloseWrite() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wclosed {
		return nil
	}
	s.wclosed = true
	return s.qs.Close()
}

// Close ends the stream both ways: the data written so far is still delivered, then the peer reads io.EOF;
// what the peer sends from now on is discarded. A Write in progress is aborted instead of waited for. It
// never blocks on the network and is idempotent.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() {
		s.qs.CancelRead(streamCodeDone)
		if s.wmu.TryLock() {
			if !s.wclosed && !s.aborted.Load() {
				s.wclosed = true
				s.qs.Close()
			}
			s.wmu.Unlock()
		} else {
			s.qs.CancelWrite(streamCodeCanceled)
		}
		s.open.Dec()
	})
	return nil
}

// Abort resets the stream both ways: data not yet delivered is dropped and the peer's Read and Write fail
// with ErrStreamReset.
func (s *Stream) Abort() {
	s.aborted.Store(true)
	s.qs.CancelRead(streamCodeCanceled)
	s.qs.CancelWrite(streamCodeCanceled)
	s.Close()
}

// SetDeadline, SetReadDeadline and SetWriteDeadline are those of net.Conn.
func (s *Stream) SetDeadline(t time.Time) error      { return s.qs.SetDeadline(t) }
func (s *Stream) SetReadDeadline(t time.Time) error  { return s.qs.SetReadDeadline(t) }
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.qs.SetWriteDeadline(t) }

// LocalAddr and RemoteAddr are the UDP addresses of the connection the stream runs on.
func (s *Stream) LocalAddr() net.Addr  { return s.conn.LocalAddr() }
func (s *Stream) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }

// streamErr wraps a reset by the peer in ErrStreamReset, counting it once per stream unless it was the
// peer's graceful Close; io.EOF and other errors are returned as they are.
func (s *Stream) streamErr(err error) error {
	var se *quic.StreamError
	if err == nil || err == io.EOF || !errors.As(err, &se) || !se.Remote {
		return err
	}
	if se.ErrorCode != streamCodeDone && s.resetSeen.CompareAndSwap(false, true) {
		s.m.fail(s.peer, ReasonStreamReset)
	}
	return fmt.Errorf("%w (%s): %w", ErrStreamReset, s.peer, err)
}
