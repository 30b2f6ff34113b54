package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
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
			g.refuse(c, hello{}, Record{Kind: KindTCP, Time: g.cfg.Now()}, ReasonTooMany)
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
	switch {
	case errors.Is(err, errHostMismatch):
		g.refuse(c, h, rec, ReasonFronting)
		return
	case err != nil:
		g.refuse(c, h, rec, ReasonMalformed)
		return
	case h.method == "CONNECT":
		g.refuse(c, h, rec, ReasonConnect)
		return
	}
	if reason := g.judge(stack, h.name, dst); reason != "" {
		g.refuse(c, h, rec, reason)
		return
	}
	if h.proto == "tls" && g.terminates(h.name) {
		g.broker(c, h, dst, &rec)
		rec.Duration = g.cfg.Now().Sub(rec.Time)
		g.record(rec)
		return
	}
	if g.hasPlaceholder(h.buf) {
		g.refuse(c, h, rec, ReasonPlaceholder)
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
	rec.BytesUp, rec.BytesDown = relay(c, up, h.buf)
	rec.Verdict, rec.Duration = Allowed, g.cfg.Now().Sub(rec.Time)
	g.record(rec)
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

// relay copies both ways between the sandbox's connection c and up, first sending first (the bytes the
// gateway read to decide), until both directions end; it returns the bytes sent up and down. Between two
// TCP sockets io.Copy splices in the kernel.
func relay(c net.Conn, up net.Conn, first []byte) (sent, received int64) {
	if len(first) > 0 {
		n, err := up.Write(first)
		sent += int64(n)
		if err != nil {
			return sent, 0
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		received, err = io.Copy(c, up)
		halfClose(c, up, err)
	})
	n, err := io.Copy(up, c)
	sent += n
	halfClose(up, c, err)
	wg.Wait()
	return sent, received
}

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
