package edge

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// leanHop is the transport of the edge's plain REST requests to a local runner whose body (if any) the
// edge holds whole (smallBody): it writes the request on a kept-alive connection and reads the answer in
// the calling goroutine (the relay's handler), where http.Transport hands each request to a connection's
// write loop and the answer back from its read loop, two goroutine switches each way that cost most of
// the hop on a loaded machine. Anything else (an upgrade, a body streamed from the client) goes to
// fallback, the edge's http.Transport.
//
// A connection goes back to its runner's idle pool (at most maxIdle, closed after idleTimeout) only when
// the request was written whole and the answer read to its end, with neither side asking to close; a
// cancelled request closes it (the runner sees its client gone, as with http.Transport). An idle
// connection the runner has closed is found before it is used (alive) and replaced; one that fails after
// the request was sent is retried on a fresh connection only when the request is idempotent or nothing of
// it was written.
type leanHop struct {
	fallback    http.RoundTripper
	dialer      net.Dialer
	maxIdle     int
	idleTimeout time.Duration

	mu    sync.Mutex
	idle  map[string][]*leanConn // by runner address, the most recently used last
	swept time.Time
}

func newLeanHop(fallback http.RoundTripper) *leanHop {
	return &leanHop{fallback: fallback, dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle: 16, idleTimeout: 90 * time.Second, idle: map[string][]*leanConn{}}
}

type leanConn struct {
	c      net.Conn
	cw     *countWriter
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	since  time.Time // idle since
	reused bool
}

// countWriter counts the bytes written to the connection (a request is retried only when none were).
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// leanable reports whether r goes by leanHop: not an upgrade, and a body of a known small length or none.
func leanable(r *http.Request) bool {
	if isUpgrade(r.Header) {
		return false
	}
	return r.Body == nil || r.Body == http.NoBody || r.ContentLength >= 0 && r.ContentLength <= smallBody
}

func (h *leanHop) RoundTrip(req *http.Request) (*http.Response, error) {
	if !leanable(req) || req.URL.Scheme != "http" {
		return h.fallback.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		body = make([]byte, req.ContentLength)
		_, err := io.ReadFull(req.Body, body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errRequestBody, err)
		}
	}
	addr := req.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "80")
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		lc, err := h.get(ctx, addr)
		if err != nil {
			return nil, err
		}
		resp, sent, err := h.exchange(ctx, lc, req, body)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// A kept-alive connection the runner closed just as it was taken: the request may go again on a
		// fresh one when the runner cannot have acted on it.
		if attempt == 0 && lc.reused && (!sent || idempotent(req)) {
			continue
		}
		return nil, err
	}
}

// idempotent reports whether req may be sent twice (net/http's rule).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// exchange writes req (with body) on lc and reads the answer's head; sent reports whether any byte of the
// request reached the connection. On an error, lc is closed.
func (h *leanHop) exchange(ctx context.Context, lc *leanConn, req *http.Request, body []byte) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { _ = lc.c.Close() }) // unblocks a write or read in progress
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		_ = lc.c.Close()
		return nil, lc.cw.n > 0, err
	}
	out := *req
	out.Body = nil
	if len(body) > 0 {
		out.Body = io.NopCloser(bytes.NewReader(body))
	}
	out.ContentLength = int64(len(body))
	lc.cw.n = 0
	if err := out.Write(lc.bw); err != nil {
		return fail(err)
	}
	if err := lc.bw.Flush(); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(lc.br, req)
	for n := 0; err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200; n++ {
		if resp.StatusCode == http.StatusSwitchingProtocols || n == 5 { // net/http allows 5 as well
			return fail(fmt.Errorf("the runner answered a plain request with %d informational answers (status %d)", n+1, resp.StatusCode))
		}
		resp, err = http.ReadResponse(lc.br, req) // an informational answer: the final one follows
	}
	if err != nil {
		return fail(err)
	}
	b := &leanBody{rc: resp.Body, h: h, lc: lc, stop: stop, keep: !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		b.release(true)
		return resp, true, nil
	}
	resp.Body = b
	return resp, true, nil
}

// leanBody is an answer's body on a leanConn: read to its end cleanly, the connection goes back to the pool;
// closed before, or failed, it is closed.
type leanBody struct {
	rc   io.ReadCloser
	h    *leanHop
	lc   *leanConn
	stop func() bool
	keep bool // neither side asked to close the connection
	done bool
}

func (b *leanBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.release(true)
	} else if err != nil {
		b.release(false)
	}
	return n, err
}

func (b *leanBody) Close() error {
	b.release(false)
	return nil
}

// release ends the exchange: the connection is kept when the body was read to its end (ended), nothing
// follows it, neither side asked to close, and the request was not cancelled meanwhile.
func (b *leanBody) release(ended bool) {
	if b.done {
		return
	}
	b.done = true
	notCancelled := b.stop()
	if ended && b.keep && notCancelled && b.lc.br.Buffered() == 0 {
		b.h.put(b.lc)
		return
	}
	_ = b.lc.c.Close()
}

// get is an idle connection to addr that is still open, or a new one.
func (h *leanHop) get(ctx context.Context, addr string) (*leanConn, error) {
	now := time.Now()
	h.mu.Lock()
	h.sweepLocked(now)
	for {
		list := h.idle[addr]
		if len(list) == 0 {
			break
		}
		lc := list[len(list)-1]
		list[len(list)-1] = nil
		if list = list[:len(list)-1]; len(list) == 0 {
			delete(h.idle, addr)
		} else {
			h.idle[addr] = list
		}
		if now.Sub(lc.since) < h.idleTimeout && alive(lc.c) {
			h.mu.Unlock()
			lc.reused = true
			return lc, nil
		}
		_ = lc.c.Close()
	}
	h.mu.Unlock()
	c, err := h.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cw := &countWriter{w: c}
	return &leanConn{c: c, cw: cw, br: bufio.NewReaderSize(c, 4<<10), bw: bufio.NewWriterSize(cw, 8<<10), addr: addr}, nil
}

func (h *leanHop) put(lc *leanConn) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepLocked(now)
	if len(h.idle[lc.addr]) >= h.maxIdle {
		_ = lc.c.Close()
		return
	}
	lc.since = now
	h.idle[lc.addr] = append(h.idle[lc.addr], lc)
}

// sweepLocked closes the idle connections older than idleTimeout, at most every idleTimeout/2 (runners
// that went away leave none open for long).
func (h *leanHop) sweepLocked(now time.Time) {
	if now.Sub(h.swept) < h.idleTimeout/2 {
		return
	}
	h.swept = now
	for addr, list := range h.idle {
		kept := list[:0]
		for _, lc := range list {
			if now.Sub(lc.since) < h.idleTimeout {
				kept = append(kept, lc)
			} else {
				_ = lc.c.Close()
			}
		}
		clear(list[len(kept):])
		if len(kept) == 0 {
			delete(h.idle, addr)
		} else {
			h.idle[addr] = kept
		}
	}
}

// idleConns is how many connections to addr are idle in the pool (for tests).
func (h *leanHop) idleConns(addr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.idle[addr])
}
