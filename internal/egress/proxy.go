package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"
)

// serveProxy accepts the sandbox's redirected TCP connections on ln until ln is closed.
func (g *Gateway) serveProxy(ln *net.TCPListener) {
	self, _ := netip.ParseAddrPort(ln.Addr().String())
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || g.ctx.Err() != nil {
				return
			}
			g.cfg.Logger.Warn("egress: accept", "sandbox", g.cfg.Sandbox, "err", err)
			select { // out of descriptors, say: let connections end before accepting again
			case <-g.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if g.active.Add(1) > int64(g.cfg.MaxConns) {
			g.active.Add(-1)
			dst, _ := originalDst(c) // recorded: a flood does not hide where it went
			g.refuse(c, hello{}, Record{Kind: KindTCP, Time: g.cfg.Now(), Dest: dst}, ReasonTooMany)
			continue
		}
		if !g.track(c) {
			g.active.Add(-1)
			c.Close()
			return
		}
		g.wg.Go(func() {
			defer g.active.Add(-1)
			defer g.untrack(c)
			defer c.Close()
			g.handle(c, self)
		})
	}
}

// handle judges one connection and relays it if it is allowed; either way it is recorded.
func (g *Gateway) handle(c *net.TCPConn, self netip.AddrPort) {
	rec := Record{Kind: KindTCP, Time: g.cfg.Now()}
	dst, err := originalDst(c)
	if err != nil || dst == self || !dst.IsValid() {
		g.refuse(c, hello{}, rec, ReasonNotRedirected)
		return
	}
	rec.Dest = dst
	stack := g.Stack()
	if stack.HardDenied(dst.Addr()) {
		g.refuse(c, hello{}, rec, ReasonHardDeny)
		return
	}
	if stack.Mode() == Closed {
		g.refuse(c, hello{}, rec, "egress closed")
		return
	}
	h, err := peek(c, g.cfg.PeekTimeout)
	rec.Name = h.name
	if reason := g.check(stack, h, err, dst); reason != "" {
		g.refuse(c, h, rec, reason)
		return
	}
	if h.proto == "tls" && g.terminates(h.name) {
		g.broker(c, h, dst, &rec)
		rec.Duration = g.cfg.Now().Sub(rec.Time)
		g.record(rec)
		return
	}
	if g.meter(0, true) != nil {
		g.refuse(c, h, rec, ReasonBudget)
		return
	}
	up, err := g.dial(dst)
	if err != nil {
		g.cfg.Logger.Debug("egress: dial", "sandbox", g.cfg.Sandbox, "dest", dst, "err", err)
		rec.Verdict, rec.Reason, rec.Duration = Failed, "unreachable", g.cfg.Now().Sub(rec.Time)
		g.record(rec)
		return
	}
	defer g.untrack(up)
	defer up.Close()
	rec.Verdict = Allowed
	if reason := g.relay(c, up, h, stack, dst, &rec); reason != "" {
		rec.Verdict, rec.Reason = Refused, reason
	}
	rec.Duration = g.cfg.Now().Sub(rec.Time)
	g.record(rec)
}

// check returns why a connection to dst whose client sent h first (peek's error err) is refused, or "".
func (g *Gateway) check(s *Stack, h hello, err error, dst netip.AddrPort) string {
	switch {
	case errors.Is(err, errHostMismatch):
		return ReasonFronting
	case err != nil:
		return headReason(err)
	case h.method == "CONNECT":
		return ReasonConnect
	}
	if reason := g.judge(s, h.name, dst); reason != "" {
		return reason
	}
	if g.hasPlaceholder(h.buf) && (h.proto != "tls" || !g.terminates(h.name)) {
		return ReasonPlaceholder
	}
	return ""
}

// judge returns why the stack refuses a TCP connection to dst naming name ("" for none), or "". A name
// (SNI, Host) must be one the gateway's resolver answered dst for: else the sandbox names an allowed
// host while reaching another (domain fronting). Exceptions: a CIDR rule allowing dst itself, and, in
// open mode, a name the resolver has not answered for, to an address it has not given (the sandbox found
// both elsewhere: nothing to compare).
func (g *Gateway) judge(s *Stack, name string, dst netip.AddrPort) string {
	names := g.names.lookup(g.cfg.Now(), dst.Addr())
	byAddr := Request{Addr: dst.Addr(), Port: int(dst.Port()), Protocol: TCP}
	q := byAddr
	q.Name, q.Names = name, names
	if d := s.Decide(q); !d.Allowed {
		return d.Reason
	}
	if name == "" || slices.Contains(names, name) {
		return ""
	}
	now := g.cfg.Now()
	if s.Mode() == Open && len(names) == 0 && !g.names.known(now, name) || s.Mode() != Open && s.Decide(byAddr).Allowed {
		return ""
	}
	return ReasonFronting
}

func (g *Gateway) dial(dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.DialTimeout)
	defer cancel()
	up, err := g.cfg.Dial(ctx, "tcp", dst.String())
	if err != nil {
		return nil, err
	}
	if !g.track(up) {
		up.Close()
		return nil, fmt.Errorf("gateway closed")
	}
	return up, nil
}

// refuse ends a refused connection and records it. An HTTP client is told why (403); any other is reset.
func (g *Gateway) refuse(c *net.TCPConn, h hello, rec Record, reason string) {
	if h.proto == "http" {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		body := "egress refused: " + reason + "\n"
		fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		_ = c.CloseWrite()
	} else {
		_ = c.SetLinger(0)
	}
	c.Close()
	rec.Verdict, rec.Reason, rec.Duration = Refused, reason, g.cfg.Now().Sub(rec.Time)
	g.record(rec)
}

type closeWriter interface{ CloseWrite() error }

// relay copies both ways between the sandbox's connection c and up until both directions end, counting
// into rec, and returns why it cut the connection ("" if it did not). Down, bytes are spliced as they
// come. Up, they are judged first where they can be: every request of plain HTTP, and the first bytes
// of a client that sent nothing before the gateway connected (else it could wait out the peek and then
// name any host).
func (g *Gateway) relay(c, up net.Conn, h hello, s *Stack, dst netip.AddrPort, rec *Record) string {
	var wg sync.WaitGroup
	var down int64
	var downErr error
	wg.Go(func() {
		down, downErr = g.copyMetered(c, up, false)
		halfClose(c, up, downErr)
	})
	sent, reason := g.relayUp(c, up, h, s, dst)
	switch {
	case reason != "" && h.proto == "http":
		// Requests already sent up are answered: the server sees their end, answers and closes.
		halfClose(up, c, nil)
	case reason != "":
		c.Close()
		up.Close()
	}
	wg.Wait()
	rec.BytesUp, rec.BytesDown = sent, down
	if reason == "" && errors.Is(downErr, errBudget) {
		reason = ReasonBudget
	}
	return reason
}

func (g *Gateway) relayUp(c, up net.Conn, h hello, s *Stack, dst netip.AddrPort) (int64, string) {
	if h.proto == "" && len(h.buf) == 0 {
		var err error
		h, err = peek(c, 0)
		if err != nil && len(h.buf) == 0 { // the client ended without a byte
			halfClose(up, c, nil)
			return 0, ""
		}
		if reason := g.check(s, h, err, dst); reason != "" {
			return 0, reason
		}
		if h.proto == "tls" && g.terminates(h.name) {
			return 0, ReasonLateHello // its connection is already open: nothing to terminate
		}
	}
	if h.proto == "http" {
		return g.relayHTTP(c, up, h, s, dst)
	}
	mw := &meteredWriter{g: g, w: up}
	_, err := mw.Write(h.buf)
	if err == nil {
		var n int64
		n, err = g.copyMetered(up, c, true)
		mw.n += n
	}
	halfClose(up, c, err)
	if errors.Is(err, errBudget) {
		return mw.n, ReasonBudget
	}
	return mw.n, ""
}

// relayHTTP reads the sandbox's HTTP/1 requests (net/http), judges each, and writes each up again in
// net/http's framing, so no request goes out unjudged: not one kept alive after the first, nor one
// pipelined behind it, nor one smuggled in a body of ambiguous length. An upgrade is refused (after it the
// stream is no longer HTTP, and a server declining it would take further requests unjudged).
func (g *Gateway) relayHTTP(c, up net.Conn, h hello, s *Stack, dst netip.AddrPort) (int64, string) {
	head := &headLimit{r: io.MultiReader(bytes.NewReader(h.buf), c)}
	br := bufio.NewReader(head)
	cw := &meteredWriter{g: g, w: up}
	for {
		req, err := head.readRequest(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				halfClose(up, c, nil)
				return cw.n, ""
			}
			return cw.n, headReason(err)
		}
		if reason := g.checkRequest(s, req, dst); reason != "" {
			return cw.n, reason
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // else Write adds Go's
		}
		scan := &placeholderScan{g: g, body: req.Body, req: req}
		if len(g.cfg.Inject) > 0 && req.Body != nil && req.Body != http.NoBody {
			req.Body = scan
		}
		if err := req.Write(cw); err != nil {
			if errors.Is(scan.err, errPlaceholder) { // net/http wraps a body's error without Unwrap
				return cw.n, ReasonPlaceholder
			}
			halfClose(up, c, err)
			if errors.Is(err, errBudget) {
				return cw.n, ReasonBudget
			}
			return cw.n, ""
		}
	}
}

// checkRequest returns why one request on a plain HTTP connection to dst is refused, or "".
func (g *Gateway) checkRequest(s *Stack, req *http.Request, dst netip.AddrPort) string {
	switch {
	case req.Method == "CONNECT":
		return ReasonConnect
	case req.Header.Get("Upgrade") != "":
		return ReasonUpgrade
	case g.placeholderIn(req):
		return ReasonPlaceholder
	}
	name, ok := hostName(req.Host)
	if !ok {
		return ReasonMalformed
	}
	return g.judge(s, name, dst)
}

// headLimit bounds the bytes read of each request head to maxPeek (net/http's reader has no bound of
// its own): else a head without end is gathered into the gateway's memory, the runner's.
type headLimit struct {
	r      io.Reader
	n      int  // bytes left to the head being read
	inHead bool // a head is being read
	hit    bool // the bound was reached
}

func (l *headLimit) Read(p []byte) (int, error) {
	if !l.inHead {
		return l.r.Read(p)
	}
	if l.n <= 0 {
		l.hit = true
		return 0, errPeekLimit
	}
	n, err := l.r.Read(p[:min(len(p), l.n)])
	l.n -= n
	return n, err
}

// readRequest reads one request from br (which reads l) with its head bounded; the body is not.
func (l *headLimit) readRequest(br *bufio.Reader) (*http.Request, error) {
	l.inHead, l.n, l.hit = true, maxPeek, false
	req, err := http.ReadRequest(br)
	l.inHead = false
	if l.hit {
		return nil, errPeekLimit
	}
	return req, err
}

// headReason is the reason of a refusal for a hello or request head that could not be read (err).
func headReason(err error) string {
	if errors.Is(err, errPeekLimit) {
		return ReasonHeadTooLarge
	}
	return ReasonMalformed
}

// placeholderIn reports whether req's URL (as sent or percent-decoded) or headers hold a placeholder.
// Its body is scanned as it is relayed (placeholderScan).
func (g *Gateway) placeholderIn(req *http.Request) bool {
	return g.placeholderInURL(req.URL) || g.placeholderInHeader(req.Header)
}

func (g *Gateway) placeholderInURL(u *url.URL) bool {
	q, _ := url.QueryUnescape(u.RawQuery)
	return g.hasPlaceholder([]byte(u.String())) || g.hasPlaceholder([]byte(u.Path)) || g.hasPlaceholder([]byte(q))
}

func (g *Gateway) placeholderInHeader(h http.Header) bool {
	for _, values := range h {
		for _, v := range values {
			if g.hasPlaceholder([]byte(v)) {
				return true
			}
		}
	}
	return false
}

// errPlaceholder ends a request body that holds a placeholder.
var errPlaceholder = errors.New("placeholder in a request body")

// placeholderScan passes a plain HTTP request's body on, holding back what could be the start of a
// placeholder, and fails with errPlaceholder where one appears in the body (split across writes and
// chunks included) or in its trailers: no whole placeholder goes up.
type placeholderScan struct {
	g       *Gateway
	body    io.ReadCloser
	req     *http.Request // its Trailer, read with the body's end
	pending []byte        // read from body, not yet passed on
	buf     []byte
	err     error // the body's end (io.EOF) or failure, once pending is passed on
}

func (s *placeholderScan) Read(p []byte) (int, error) {
	hold := 0
	for i := range s.g.cfg.Inject {
		hold = max(hold, len(s.g.cfg.Inject[i].Placeholder)-1)
	}
	for {
		switch {
		case errors.Is(s.err, errPlaceholder):
			return 0, s.err
		case s.err != nil && len(s.pending) == 0:
			return 0, s.err
		case s.err != nil || len(s.pending) > hold:
			keep := hold
			if s.err != nil {
				keep = 0
			}
			n := copy(p, s.pending[:len(s.pending)-keep])
			s.pending = s.pending[n:]
			return n, nil
		}
		if s.buf == nil {
			s.buf = make([]byte, 32<<10)
		}
		n, err := s.body.Read(s.buf)
		s.pending = append(s.pending, s.buf[:n]...)
		if s.g.hasPlaceholder(s.pending) || errors.Is(err, io.EOF) && s.g.placeholderInHeader(s.req.Trailer) {
			s.pending, s.err = nil, errPlaceholder
		} else if err != nil {
			s.err = err
		}
	}
}

func (s *placeholderScan) Close() error { return s.body.Close() }

// halfClose passes on the end of one direction: its reader's EOF as a FIN to its writer, or an error as
// the end of both connections.
func halfClose(w, r net.Conn, err error) {
	if cw, ok := w.(closeWriter); ok && err == nil {
		_ = cw.CloseWrite()
		return
	}
	w.Close()
	r.Close()
}
