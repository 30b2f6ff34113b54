package egress

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Bounds of the resolver's answers.
const (
	minAnswerTTL  = 30 * time.Second // a name's addresses are remembered at least this long
	maxAnswerTTL  = time.Hour        // and at most this long
	maxAnswerAddr = 32               // addresses kept of one answer
)

// dnsServer is the resolver's sockets.
type dnsServer struct {
	servers []*dns.Server
	tcp     *boundedListener // nil: no TCP
}

func (g *Gateway) startDNS() *dnsServer {
	h := dns.HandlerFunc(g.serveDNS)
	s := &dnsServer{servers: []*dns.Server{{PacketConn: g.cfg.DNS, Handler: h}}}
	if g.cfg.DNSTCP != nil {
		s.tcp = &boundedListener{Listener: g.cfg.DNSTCP, g: g}
		s.servers = append(s.servers, &dns.Server{Listener: s.tcp, Handler: h,
			ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 5 * time.Second }})
	}
	for _, srv := range s.servers {
		g.wg.Go(func() { _ = srv.ActivateAndServe() })
	}
	return s
}

func (s *dnsServer) shutdown(ctx context.Context) {
	for _, srv := range s.servers {
		// A server that has not started yet refuses to shut down: close its socket instead.
		if srv.ShutdownContext(ctx) != nil {
			if srv.PacketConn != nil {
				srv.PacketConn.Close()
			}
			if srv.Listener != nil {
				srv.Listener.Close()
			}
		}
	}
}

// serveDNS answers one query of the sandbox: only A and AAAA of a name the policy allows are asked
// upstream, only the answer's addresses the hard deny list lets through are returned (and remembered
// under the name), and everything else is refused or answered empty, with a record.
func (g *Gateway) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	reply, rec := g.resolve(req)
	if rec.Verdict != "" {
		rec.Kind = KindDNS
		g.record(rec)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		// What the client can take over UDP: 512 bytes, or what its EDNS0 says; cut, it asks over TCP.
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = max(int(o.UDPSize()), dns.MinMsgSize)
			reply.SetEdns0(o.UDPSize(), false)
		}
		reply.Truncate(size)
	}
	_ = w.WriteMsg(reply)
}

// resolve builds the reply to req and the record of the decision (no verdict: nothing to record).
func (g *Gateway) resolve(req *dns.Msg) (*dns.Msg, Record) {
	reply := new(dns.Msg)
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || req.Response {
		return reply.SetRcode(req, dns.RcodeFormatError), Record{Verdict: Refused, Reason: ReasonMalformed}
	}
	q := req.Question[0]
	if !g.dnsRL.Allow() {
		rec := Record{Verdict: Refused, Reason: ReasonQueryRate}
		if !g.rateAudit.Allow() {
			g.cfg.Metrics.count(Record{Kind: KindDNS, Verdict: Refused, Reason: ReasonQueryRate})
			rec = Record{}
		}
		return reply.SetRcode(req, dns.RcodeRefused), rec
	}
	name, ok := NormalName(q.Name)
	if !ok || q.Qclass != dns.ClassINET {
		return reply.SetRcode(req, dns.RcodeRefused), Record{Name: clip(q.Name), Verdict: Refused, Reason: ReasonMalformed}
	}
	if len(name) > g.cfg.MaxName {
		return reply.SetRcode(req, dns.RcodeRefused), Record{Name: clip(name), Verdict: Refused, Reason: ReasonNameLength}
	}
	if d := g.Stack().Decide(Request{Name: name}); !d.Allowed {
		return reply.SetRcode(req, dns.RcodeRefused), Record{Name: name, Verdict: Refused, Reason: d.Reason}
	}
	if q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA {
		// Answered empty without asking upstream: no record type carries data out (TXT, NULL tunnels).
		return reply.SetReply(req), Record{Name: name, Verdict: Refused, Reason: ReasonQueryType}
	}
	return g.forward(req, name, q.Qtype)
}

// forward asks upstream for name's addresses of type qtype and answers with those the hard deny list
// lets through, flattened under the name asked (the CNAME chain is not shown).
func (g *Gateway) forward(req *dns.Msg, name string, qtype uint16) (*dns.Msg, Record) {
	reply := new(dns.Msg)
	up := new(dns.Msg)
	up.SetQuestion(dns.Fqdn(name), qtype) // a fresh query: nothing of the sandbox's (EDNS options) goes out
	resp, err := g.exchange(up)
	if err != nil {
		g.cfg.Logger.Debug("egress: upstream resolver", "sandbox", g.cfg.Sandbox, "err", err)
		return reply.SetRcode(req, dns.RcodeServerFailure), Record{Name: name, Verdict: Failed, Reason: "upstream"}
	}
	stack := g.Stack()
	for _, rr := range resp.Answer {
		// A chain through a name a deny rule names (alias.test CNAME denied.test) reaches that host
		// under another name: refused whole.
		names := []string{rr.Header().Name}
		if c, ok := rr.(*dns.CNAME); ok {
			names = append(names, c.Target)
		}
		for _, n := range names {
			if n, ok := NormalName(n); ok && n != name {
				if why := stack.DeniedName(n); why != "" {
					return reply.SetRcode(req, dns.RcodeRefused), Record{Name: name, Verdict: Refused, Reason: why}
				}
			}
		}
	}
	reply.SetRcode(req, resp.Rcode)
	reply.RecursionAvailable = true
	now := g.cfg.Now()
	var rebound []netip.Addr
	for _, rr := range resp.Answer {
		a, ttl, ok := address(rr, qtype)
		if !ok || len(reply.Answer) >= maxAnswerAddr {
			continue
		}
		if stack.HardDenied(a) {
			rebound = append(rebound, a)
			continue
		}
		ttl = min(max(ttl, minAnswerTTL), maxAnswerTTL)
		if !g.names.add(now, name, a, now.Add(ttl)) {
			continue
		}
		reply.Answer = append(reply.Answer, answer(name, a, ttl))
	}
	for _, a := range rebound {
		g.record(Record{Kind: KindDNS, Name: name, Dest: netip.AddrPortFrom(a, 0), Verdict: Refused, Reason: ReasonRebinding})
	}
	return reply, Record{Name: name, Verdict: Allowed}
}

// exchange asks the upstream resolver, over UDP, then TCP when the answer was cut.
func (g *Gateway) exchange(m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
	defer cancel()
	var resp *dns.Msg
	for _, network := range []string{"udp", "tcp"} {
		c, err := g.cfg.Dial(ctx, network, g.cfg.Upstream.String())
		if err != nil {
			return nil, err
		}
		client := &dns.Client{Net: network}
		if deadline, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(deadline)
		}
		resp, _, err = client.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: c})
		c.Close()
		if err != nil {
			return nil, err
		}
		if !resp.Truncated {
			break
		}
	}
	return resp, nil
}

// address is rr's address when rr is an answer of type qtype.
func address(rr dns.RR, qtype uint16) (netip.Addr, time.Duration, bool) {
	var ip net.IP
	switch r := rr.(type) {
	case *dns.A:
		ip = r.A
	case *dns.AAAA:
		ip = r.AAAA
	default:
		return netip.Addr{}, 0, false
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok || rr.Header().Rrtype != qtype {
		return netip.Addr{}, 0, false
	}
	if qtype == dns.TypeA {
		a = a.Unmap()
	}
	return a, time.Duration(rr.Header().Ttl) * time.Second, true
}

func answer(name string, a netip.Addr, ttl time.Duration) dns.RR {
	hdr := dns.RR_Header{Name: dns.Fqdn(name), Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)}
	if a.Is4() {
		hdr.Rrtype = dns.TypeA
		return &dns.A{Hdr: hdr, A: a.AsSlice()}
	}
	hdr.Rrtype = dns.TypeAAAA
	return &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()}
}

// boundedListener holds the resolver's TCP connections to MaxConns at once (each is a goroutine and
// buffers of the runner's): one more is closed at once and recorded (at most one record a second, like
// queries past the rate; all are counted).
type boundedListener struct {
	net.Listener
	g      *Gateway
	active atomic.Int64
}

func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.active.Add(1) <= int64(l.g.cfg.MaxConns) {
			return &boundedConn{Conn: c, l: l}, nil
		}
		l.active.Add(-1)
		c.Close()
		rec := Record{Kind: KindDNS, Verdict: Refused, Reason: ReasonTooMany}
		if l.g.rateAudit.Allow() {
			l.g.record(rec)
		} else {
			l.g.cfg.Metrics.count(rec)
		}
	}
}

type boundedConn struct {
	net.Conn
	l    *boundedListener
	once sync.Once
}

func (c *boundedConn) Close() error {
	c.once.Do(func() { c.l.active.Add(-1) })
	return c.Conn.Close()
}
