package isolate

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// The runner serves a veth network's forwarded ports and DNS itself, from sockets it opens inside the
// namespace (Network.inside): no process per sandbox. A listener on the namespace's loopback at each
// forwarded port relays to the same port of the host's loopback (the model proxy), and DNSForward:53 (UDP
// and TCP) relays to the host's resolver. What the sandbox sends is passed on unread.
const (
	// maxRelayConns bounds the relayed TCP connections of one sandbox at once; beyond it new ones are
	// closed at once.
	maxRelayConns = 256
	// maxDNSQueries bounds the DNS queries over UDP in flight for one sandbox; beyond it queries are
	// dropped (the resolver asks again).
	maxDNSQueries = 64
	// dnsWait bounds the wait for the resolver's answer (the sandbox's resolv.conf says timeout:2).
	dnsWait = 2 * time.Second
	// relayDial bounds the connection to the host's end of a relay.
	relayDial = 10 * time.Second
)

// relays are a veth network's listeners and what they relay now; close ends them all.
type relays struct {
	mu     sync.Mutex
	closed bool
	open   map[io.Closer]struct{} // listeners and relayed connections, closed by close
	conns  chan struct{}          // a slot per relayed TCP connection
	dns    chan struct{}          // a slot per UDP query in flight
	wg     sync.WaitGroup
}

// startRelays opens the network's listeners inside its namespace and serves them.
func (n *Network) startRelays() error {
	r := &relays{open: map[io.Closer]struct{}{}, conns: make(chan struct{}, maxRelayConns), dns: make(chan struct{}, maxDNSQueries)}
	n.relays = r
	type tcp struct {
		addr, target string
		optional     bool
	}
	var tcps []tcp
	for _, p := range n.cfg.ForwardTCP {
		port := strconv.Itoa(int(p))
		target := net.JoinHostPort("127.0.0.1", port)
		tcps = append(tcps, tcp{net.JoinHostPort("127.0.0.1", port), target, false},
			tcp{net.JoinHostPort("::1", port), target, !n.veth.peer6.IsValid()})
	}
	dns := net.JoinHostPort(DNSForward, "53")
	tcps = append(tcps, tcp{dns, n.cfg.Resolver.String(), false})
	var lns []net.Listener
	var pc net.PacketConn
	err := n.inside(func() error {
		for _, t := range tcps {
			ln, err := net.Listen("tcp", t.addr)
			if err != nil {
				if t.optional {
					lns = append(lns, nil)
					continue
				}
				return err
			}
			lns = append(lns, ln)
		}
		var err error
		pc, err = net.ListenPacket("udp4", dns)
		return err
	})
	for _, ln := range lns {
		if ln != nil {
			r.track(ln)
		}
	}
	if pc != nil {
		r.track(pc)
	}
	if err != nil {
		return err
	}
	for i, ln := range lns {
		if ln != nil {
			r.wg.Add(1)
			go r.serveTCP(ln, tcps[i].target)
		}
	}
	r.wg.Add(1)
	go r.serveDNS(pc, n.cfg.Resolver)
	return nil
}

// track adds c to what close closes; false (and c closed) once closed.
func (r *relays) track(c io.Closer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.open[c] = struct{}{}
	return true
}

func (r *relays) untrack(c io.Closer) {
	r.mu.Lock()
	delete(r.open, c)
	r.mu.Unlock()
	c.Close()
}

// close closes every listener and relayed connection and waits for their goroutines.
func (r *relays) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.open {
		c.Close()
	}
	r.open = nil
	r.mu.Unlock()
	r.wg.Wait()
}

// serveTCP accepts connections on ln and relays each to target (dialled from the runner's namespace).
func (r *relays) serveTCP(ln net.Listener, target string) {
	defer r.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors, say: try again shortly
			continue
		}
		select {
		case r.conns <- struct{}{}:
		default:
			c.Close()
			continue
		}
		if !r.track(c) {
			<-r.conns
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-r.conns }()
			defer r.untrack(c)
			u, err := net.DialTimeout("tcp", target, relayDial)
			if err != nil || !r.track(u) {
				return
			}
			defer r.untrack(u)
			pipe(c, u)
		}()
	}
}

// pipe copies both ways between a and b until both directions ended.
func pipe(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(b, a)
		closeWrite(b)
		close(done)
	}()
	_, _ = io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// serveDNS relays each datagram on pc to upstream and its answer back.
func (r *relays) serveDNS(pc net.PacketConn, upstream netip.AddrPort) {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		nb, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case r.dns <- struct{}{}:
		default:
			continue
		}
		q := append([]byte(nil), buf[:nb]...)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-r.dns }()
			u, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(upstream))
			if err != nil || !r.track(u) {
				return
			}
			defer r.untrack(u)
			_ = u.SetDeadline(time.Now().Add(dnsWait))
			if _, err := u.Write(q); err != nil {
				return
			}
			ans := make([]byte, 64<<10)
			m, err := u.Read(ans)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(ans[:m], from)
		}()
	}
}
