package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/quic-go/quic-go"
)

// peerKey names one peer edge: its region and the address of its mesh listener.
type peerKey struct{ region, addr string }

// peer holds the one connection this node keeps to a peer edge, dialing it when there is none or the last
// one died. Concurrent Opens wait for one dial.
type peer struct {
	node *Node
	key  peerKey

	mu      sync.Mutex
	conn    *quic.Conn // nil or possibly dead; checked at each get
	dialing *dialCall  // the dial in progress, if any
}

// dialCall is one dial that every Open waiting for the peer shares.
type dialCall struct {
	done chan struct{}
	conn *quic.Conn
	err  error
}

// peer is the peer entry for region at addr, made on first use. Entries live as long as the node: their
// number is that of the (region, address) pairs the caller opens streams to.
func (n *Node) peer(region, addr string) (*peer, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	k := peerKey{region, addr}
	p := n.peers[k]
	if p == nil {
		p = &peer{node: n, key: k}
		n.peers[k] = p
	}
	return p, nil
}

// get answers the live connection to the peer, dialing one if needed; fresh says it was dialed for this
// call (or calls waiting alongside). It waits for the dial until ctx ends.
func (p *peer) get(ctx context.Context) (conn *quic.Conn, fresh bool, err error) {
	p.mu.Lock()
	if c := p.conn; c != nil && c.Context().Err() == nil {
		p.mu.Unlock()
		return c, false, nil
	}
	d := p.dialing
	if d == nil {
		d = &dialCall{done: make(chan struct{})}
		if !p.node.add(func() { p.dial(d) }) {
			p.mu.Unlock()
			return nil, false, ErrClosed
		}
		p.dialing = d
	}
	p.mu.Unlock()
	select {
	case <-d.done:
		return d.conn, true, d.err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// drop forgets conn if it is still the peer's connection, so that the next get dials.
func (p *peer) drop(conn *quic.Conn) {
	p.mu.Lock()
	if p.conn == conn {
		p.conn = nil
	}
	p.mu.Unlock()
}

// dial dials the peer for d, bounded by the handshake timeout and the node's life, not by any one caller.
func (p *peer) dial(d *dialCall) {
	n := p.node
	conn, err := p.connect()
	if err != nil && !errors.Is(err, ErrClosed) {
		n.m.fail(p.key.region, Reason(err))
		n.log.Warn("mesh dial failed", "peer", p.key.region, "addr", p.key.addr, "reason", Reason(err), "err", err)
	}
	p.mu.Lock()
	p.dialing = nil
	p.conn = conn
	d.conn, d.err = conn, err
	close(d.done)
	p.mu.Unlock()
	if err != nil {
		return
	}
	n.mu.Lock()
	n.conns[conn] = liveConn{conn, p.key.region, dirOut}
	n.mu.Unlock()
	n.log.Info("mesh peer dialed", "peer", p.key.region, "addr", p.key.addr)
	<-conn.Context().Done() // the node's Close closes it
	n.mu.Lock()
	delete(n.conns, conn)
	n.mu.Unlock()
	p.drop(conn)
	n.log.Info("mesh connection closed", "peer", p.key.region, "addr", p.key.addr, "cause", context.Cause(conn.Context()))
}

func (p *peer) connect() (*quic.Conn, error) {
	n := p.node
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.HandshakeTimeout)
	defer cancel()
	ua, err := resolve(ctx, p.key.addr)
	if err != nil {
		return nil, fmt.Errorf("%w: resolve %q: %w", ErrDial, truncate(p.key.addr), err)
	}
	tr, err := n.dialTransport()
	if err != nil {
		return nil, err
	}
	var verifyErr error // set by the handshake's VerifyConnection, which runs before Dial returns
	conn, err := tr.Dial(ctx, ua, n.clientTLS(p.key.region, &verifyErr), n.quicConfig(-1))
	switch {
	case err == nil:
		return conn, nil
	case verifyErr != nil:
		return nil, verifyErr
	case n.ctx.Err() != nil:
		return nil, ErrClosed
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: no handshake within %s: %w", ErrDial, n.cfg.HandshakeTimeout, err)
	}
	return nil, connErr(err)
}
