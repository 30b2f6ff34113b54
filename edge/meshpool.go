package edge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Forwarded requests go on kept mesh streams (docs/PROTOCOL.md#mesh-streams): a mesh.KindRequests stream
// carries one exchange after another, each a request and its answer framed as chunks (exchange), so that
// a request forwarded to a peer edge pays neither a stream's open nor its close. The forwarding edge uses a
// stream for one exchange at a time and keeps it (meshPool) only when the exchange completed both ways; the
// serving edge serves its exchanges in order and ends it, quietly, only between two of them.

const (
	// maxChunk bounds one chunk of an exchange; a longer write is split.
	maxChunk = 64 << 10
	// meshPoolIdle is how many idle streams the forwarding edge keeps per peer edge; meshPoolIdleTimeout how
	// long one stays: an older one is closed, not used.
	meshPoolIdle        = 16
	meshPoolIdleTimeout = 20 * time.Second
	// meshServeIdleTimeout is how long the serving edge waits for a stream's next exchange, longer than the
	// forwarding edge keeps it idle: a stream is nearly always ended by the edge that uses it.
	meshServeIdleTimeout = 60 * time.Second
	// drainLimit bounds the rest of a request body the serving edge reads past an answer that did not read
	// it all, to keep the stream; a longer rest ends it.
	drainLimit = 64 << 10
)

// errIdleClosed: the serving edge ended a kept stream before reading anything of the exchange sent on it (it
// does so only between exchanges), so the request was not acted on and may go again.
var errIdleClosed = errors.New("the peer edge ended the kept mesh stream before the request")

// keptStream is what the pool needs of a *mesh.Stream.
type keptStream interface {
	meshStream
	// Connection ends with the stream's connection (mesh.Stream.Connection).
	Connection() context.Context
}

// meshPool keeps the forwarding edge's idle KindRequests streams, per peer edge (its mesh address). Safe for
// concurrent use.
type meshPool struct {
	mu    sync.Mutex
	idle  map[string][]idleStream // the most recently used last
	swept time.Time
}

type idleStream struct {
	s     keptStream
	since time.Time
}

// usable reports whether the stream may carry another exchange: its connection lives, and it has not been
// idle for meshPoolIdleTimeout.
func (is idleStream) usable(now time.Time) bool {
	return is.s.Connection().Err() == nil && now.Sub(is.since) < meshPoolIdleTimeout
}

func newMeshPool() *meshPool { return &meshPool{idle: map[string][]idleStream{}} }

// get takes an idle stream to addr, nil when there is none. A stream whose connection ended, or idle for
// longer than meshPoolIdleTimeout, is closed and never answered.
func (p *meshPool) get(addr string) keptStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, now := p.idle[addr], time.Now()
	var s keptStream
	for s == nil && len(l) > 0 {
		is := l[len(l)-1]
		l = l[:len(l)-1]
		if is.usable(now) {
			s = is.s
		} else {
			_ = is.s.Close()
		}
	}
	p.set(addr, l)
	return s
}

// put keeps s, idle, for the next request to addr; the oldest stream goes when there are meshPoolIdle.
func (p *meshPool) put(addr string, s keptStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.sweepLocked(now)
	l := p.idle[addr]
	for len(l) > 0 && (len(l) >= meshPoolIdle || !l[0].usable(now)) {
		_ = l[0].s.Close()
		l = l[1:]
	}
	p.set(addr, append(l, idleStream{s, now}))
}

// sweepLocked closes the streams of every peer edge that are no longer usable, at most every
// meshPoolIdleTimeout/2: peer edges no longer forwarded to keep none for long.
func (p *meshPool) sweepLocked(now time.Time) {
	if now.Sub(p.swept) < meshPoolIdleTimeout/2 {
		return
	}
	p.swept = now
	for addr, l := range p.idle {
		p.set(addr, slices.DeleteFunc(l, func(is idleStream) bool {
			if is.usable(now) {
				return false
			}
			_ = is.s.Close()
			return true
		}))
	}
}

func (p *meshPool) set(addr string, l []idleStream) {
	if len(l) == 0 {
		delete(p.idle, addr)
		return
	}
	p.idle[addr] = l
}

// size is how many idle streams are kept to addr.
func (p *meshPool) size(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[addr])
}

// exchange is one request and its answer on a KindRequests stream, as a meshStream: what is written goes as
// chunks (length u32 big endian, 1 to maxChunk bytes), CloseWrite sends the zero-length chunk that ends this
// side, and Read reads the peer's chunks up to its zero-length one (io.EOF). Abort resets the stream, which
// ends with the exchange. Close ends the exchange: on the forwarding edge (pool set) the stream goes back to
// the pool (or, once, is ended) when both sides' ends were exchanged and the answer read to its end, else
// it is reset; on the
// serving edge the answer's end is sent, the rest of the request read (up to drainLimit) and the exchange
// is reusable when that succeeded, else the stream is reset.
//
// Reads come from one goroutine at a time, writes too; Close and Abort may be called concurrently with them.
type exchange struct {
	s    keptStream
	pool *meshPool // forwarding edge: where the stream goes back
	// once: the forwarding edge ends the stream after this exchange rather than keep it (a request body
	// streamed from the client, of which the serving edge may have had to leave more than drainLimit).
	once bool
	addr string // the peer edge's mesh address (pool key)

	// read side
	left      uint32 // bytes left of the chunk being read
	got       int64  // bytes read from the stream in this exchange
	eof       atomic.Bool
	rbroken   atomic.Bool
	idleEnded bool // the stream ended before any byte of this exchange (errIdleClosed)

	wmu     sync.Mutex
	wended  bool // the zero-length chunk was written
	wbroken bool
	wbuf    []byte

	closing  sync.Once
	aborted  atomic.Bool
	reusable bool // serving edge: Close kept the stream for the next exchange
}

var _ meshStream = (*exchange)(nil)

func (x *exchange) Read(p []byte) (int, error) {
	switch {
	case x.eof.Load():
		return 0, io.EOF
	case x.rbroken.Load():
		return 0, errBadFrame
	case len(p) == 0:
		return 0, nil
	}
	if x.left == 0 {
		if err := x.nextChunk(); err != nil {
			return 0, err
		}
	}
	if uint32(len(p)) > x.left {
		p = p[:x.left]
	}
	n, err := x.s.Read(p)
	x.got += int64(n)
	x.left -= uint32(n)
	if err != nil {
		return n, x.readFailed(err)
	}
	return n, nil
}

// nextChunk reads the next chunk's length: io.EOF for the zero-length chunk.
func (x *exchange) nextChunk() error {
	var hdr [4]byte
	n, err := io.ReadFull(x.s, hdr[:])
	x.got += int64(n)
	if err != nil {
		return x.readFailed(err)
	}
	c := binary.BigEndian.Uint32(hdr[:])
	if c == 0 {
		x.eof.Store(true)
		return io.EOF
	}
	if c > maxChunk {
		x.rbroken.Store(true)
		return badFrame("chunk of %d bytes", c)
	}
	x.left = c
	return nil
}

// readFailed marks the exchange's framing lost: a stream that ends where a chunk was due or inside one is
// cut short (errBadFrame), or errIdleClosed before any byte of the exchange.
func (x *exchange) readFailed(err error) error {
	x.rbroken.Store(true)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		if x.got == 0 {
			x.idleEnded = true
			return errIdleClosed
		}
		return badFrame("exchange cut short")
	}
	return err
}

func (x *exchange) Write(p []byte) (int, error) {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	return x.write(p, false)
}

// write sends p as chunks, with the zero-length chunk after them when end; under wmu.
func (x *exchange) write(p []byte, end bool) (int, error) {
	if x.wended || x.wbroken {
		return 0, fmt.Errorf("mesh exchange write: %w", net.ErrClosed)
	}
	n := 0
	for len(p) > 0 || end {
		c := p[:min(len(p), maxChunk)]
		x.wbuf = x.wbuf[:0]
		if len(c) > 0 {
			x.wbuf = binary.BigEndian.AppendUint32(x.wbuf, uint32(len(c)))
			x.wbuf = append(x.wbuf, c...)
		}
		last := len(c) == len(p) && end
		if last {
			x.wbuf = binary.BigEndian.AppendUint32(x.wbuf, 0)
		}
		if _, err := x.s.Write(x.wbuf); err != nil {
			x.wbroken = true
			return n, err
		}
		n += len(c)
		p = p[len(c):]
		if last {
			x.wended = true
			break
		}
	}
	return n, nil
}

// writeAll sends p and the end of this side in one write to the stream when p fits one chunk.
func (x *exchange) writeAll(p []byte) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	_, err := x.write(p, true)
	return err
}

func (x *exchange) CloseWrite() error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if x.wended {
		return nil
	}
	_, err := x.write(nil, true)
	return err
}

func (x *exchange) Close() error {
	x.closing.Do(func() {
		if x.aborted.Load() {
			return
		}
		if x.pool != nil {
			x.release()
		} else {
			x.finish()
		}
	})
	return nil
}

// release is the forwarding edge's end of the exchange: the stream goes back to the pool when both sides
// ended it and the answer was read to its end, and is reset otherwise (the peer stops serving the request).
func (x *exchange) release() {
	ended := false
	if x.wmu.TryLock() { // a write in progress (a body the peer no longer reads): not reusable
		ended = x.wended && !x.wbroken
		x.wmu.Unlock()
	}
	if ended && x.eof.Load() && !x.rbroken.Load() && x.s.Connection().Err() == nil && x.s.SetDeadline(time.Time{}) == nil {
		if x.once {
			_ = x.s.Close() // between exchanges: the serving edge ends it quietly
			return
		}
		x.pool.put(x.addr, x.s)
		return
	}
	x.aborted.Store(true)
	x.s.Abort()
}

// finish is the serving edge's end of the exchange: the answer's end, then the rest of the request.
func (x *exchange) finish() {
	x.wmu.Lock()
	ok := x.wended && !x.wbroken
	if !x.wended && !x.wbroken {
		_, err := x.write(nil, true)
		ok = err == nil
	}
	x.wmu.Unlock()
	if ok && !x.eof.Load() && !x.rbroken.Load() {
		_ = x.s.SetReadDeadline(time.Now().Add(grantReadTimeout))
		n, err := io.Copy(io.Discard, io.LimitReader(x, drainLimit+1))
		ok = err == nil && n <= drainLimit && x.eof.Load()
	}
	if ok && x.s.SetDeadline(time.Time{}) == nil {
		x.reusable = true
		return
	}
	x.aborted.Store(true)
	x.s.Abort()
}

func (x *exchange) Abort() {
	x.aborted.Store(true)
	x.s.Abort()
}

func (x *exchange) SetDeadline(t time.Time) error      { return x.s.SetDeadline(t) }
func (x *exchange) SetReadDeadline(t time.Time) error  { return x.s.SetReadDeadline(t) }
func (x *exchange) SetWriteDeadline(t time.Time) error { return x.s.SetWriteDeadline(t) }
func (x *exchange) LocalAddr() net.Addr                { return x.s.LocalAddr() }
func (x *exchange) RemoteAddr() net.Addr               { return x.s.RemoteAddr() }

// await waits, up to idle, for the first chunk of the stream's next exchange. It answers false with a nil
// error when the forwarding edge ended the stream, or left it idle, before any byte of one (the stream is
// then to be closed quietly), false with the error when the stream failed otherwise (to be reset).
func (x *exchange) await(idle time.Duration) (bool, error) {
	_ = x.s.SetReadDeadline(time.Now().Add(idle))
	err := x.nextChunk()
	if err == nil || err == io.EOF {
		return true, nil
	}
	var ne net.Error
	if x.got == 0 && (x.idleEnded || errors.As(err, &ne) && ne.Timeout()) {
		return false, nil
	}
	return false, err
}
