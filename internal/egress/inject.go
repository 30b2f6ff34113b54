package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// MinPlaceholder is the shortest placeholder: long enough not to occur by chance in a request.
const MinPlaceholder = 16

// Injection is a credential the gateway puts into the sandbox's requests to some hosts: the sandbox
// holds Placeholder (an opaque reference, in an environment variable say) and sends it in Header; the
// gateway, terminating TLS for Hosts only, replaces it with Secret. A placeholder sent anywhere else (to
// another host, in another header, in the URL, or over plain HTTP) is refused.
type Injection struct {
	Hosts  []string // domain patterns, as a Rule's Domain
	Header string
	// Scheme is what comes before the placeholder in Header's value ("Bearer"; "" for the placeholder
	// alone): the value must be exactly that, else it is refused. A value shaped otherwise ("Bearer
	// <placeholder>x", "Junk <placeholder>") would be refused by the server, and a server that quotes
	// the credential it refused (many error messages do) would hand the secret to the sandbox.
	Scheme      string
	Placeholder string
	Secret      string
}

// validate normalises inj's hosts and header name.
func (inj *Injection) validate() error {
	if len(inj.Hosts) == 0 {
		return fmt.Errorf("%w: injection without hosts", ErrConfig)
	}
	for i, h := range inj.Hosts {
		d, err := normalDomain(h, true)
		if err != nil {
			return fmt.Errorf("%w: injection host: %v", ErrConfig, err)
		}
		inj.Hosts[i] = d
	}
	inj.Header = textproto.CanonicalMIMEHeaderKey(inj.Header)
	switch {
	case inj.Header == "" || strings.ContainsAny(inj.Header, " \t\r\n:"):
		return fmt.Errorf("%w: injection header %q", ErrConfig, inj.Header)
	case strings.ContainsFunc(inj.Scheme, func(r rune) bool { return r > '~' || !isToken(byte(r)) }):
		return fmt.Errorf("%w: injection scheme %q is not a token", ErrConfig, clip(inj.Scheme))
	case len(inj.Placeholder) < MinPlaceholder:
		return fmt.Errorf("%w: injection placeholder shorter than %d bytes", ErrConfig, MinPlaceholder)
	case inj.Secret == "" || strings.ContainsAny(inj.Secret, "\r\n"):
		return fmt.Errorf("%w: injection secret empty or holding a line break", ErrConfig)
	}
	return nil
}

func (inj *Injection) covers(host string) bool {
	for _, p := range inj.Hosts {
		if domainMatch(p, host) {
			return true
		}
	}
	return false
}

// terminates reports whether the gateway terminates TLS for host: some injection covers it.
func (g *Gateway) terminates(host string) bool {
	if host == "" || g.cfg.CA == nil {
		return false
	}
	for i := range g.cfg.Inject {
		if g.cfg.Inject[i].covers(host) {
			return true
		}
	}
	return false
}

// hasPlaceholder reports whether b holds any injection's placeholder.
func (g *Gateway) hasPlaceholder(b []byte) bool {
	for i := range g.cfg.Inject {
		if bytes.Contains(b, []byte(g.cfg.Inject[i].Placeholder)) {
			return true
		}
	}
	return false
}

// inject replaces the placeholders of req's headers for host, and returns why req is refused instead: a
// Host other than the TLS name (fronting inside the tunnel), or a placeholder where no injection for
// host puts its secret.
func (g *Gateway) inject(req *http.Request, host string) string {
	switch name, ok := hostName(req.Host); {
	case !ok:
		return ReasonMalformed
	case name != host:
		return ReasonFronting
	case strings.EqualFold(req.Method, "TRACE") || strings.EqualFold(req.Method, "TRACK"):
		return ReasonTrace // the server answers with the request it got: the secret
	}
	if g.placeholderInURL(req.URL) {
		return ReasonPlaceholder
	}
	for name, values := range req.Header {
		for j, v := range values {
			for i := range g.cfg.Inject {
				inj := &g.cfg.Inject[i]
				if !strings.Contains(v, inj.Placeholder) {
					continue
				}
				if name != inj.Header || !inj.covers(host) || len(values) != 1 || !inj.injectable(v) {
					return ReasonPlaceholder
				}
				v = strings.ReplaceAll(v, inj.Placeholder, inj.Secret)
			}
			values[j] = v
		}
	}
	return ""
}

// injectable reports whether v, a value of inj's header, is the one the secret is put in: the
// placeholder after the scheme (compared in any case), nothing else around it.
func (inj *Injection) injectable(v string) bool {
	if inj.Scheme == "" {
		return v == inj.Placeholder
	}
	scheme, ok := strings.CutSuffix(v, " "+inj.Placeholder)
	return ok && strings.EqualFold(scheme, inj.Scheme)
}

// broker terminates the sandbox's TLS for host with a leaf of the sandbox's CA, and relays its HTTP/1.1
// requests, credentials injected, to dst over TLS verified against the upstream roots; rec gets the
// connection's verdict, reason and bytes (on the sandbox's side).
func (g *Gateway) broker(c net.Conn, h hello, dst netip.AddrPort, rec *Record) {
	cc := &countConn{Conn: c, g: g, r: io.MultiReader(bytes.NewReader(h.buf), c)}
	tc := tls.Server(cc, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return g.cfg.CA.Leaf(h.name) },
		NextProtos:     []string{"http/1.1"},
	})
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.DialTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	defer func() {
		rec.BytesUp, rec.BytesDown = cc.in.Load(), cc.out.Load()
		if cc.spent.Load() {
			rec.Verdict, rec.Reason = Refused, ReasonBudget
		}
	}()
	if err != nil {
		rec.Verdict, rec.Reason = Refused, ReasonMalformed
		return
	}
	host := h.name
	if dst.Port() != 443 {
		host = net.JoinHostPort(h.name, strconv.Itoa(int(dst.Port())))
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return g.cfg.Dial(ctx, "tcp", dst.String())
		},
		TLSClientConfig:       &tls.Config{ServerName: h.name, RootCAs: g.cfg.UpstreamRoots},
		MaxIdleConnsPerHost:   1,
		DisableCompression:    true, // the body goes back as the server sent it
		ResponseHeaderTimeout: time.Minute,
	}
	defer tr.CloseIdleConnections()
	rec.Verdict, rec.Reason = Injected, ""
	head := &headLimit{r: tc}
	br := bufio.NewReader(head)
	for {
		req, err := head.readRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && rec.Verdict == Injected {
				rec.Verdict, rec.Reason = Refused, headReason(err)
			}
			return
		}
		if reason := g.inject(req, h.name); reason != "" {
			writeStatus(tc, http.StatusForbidden, "egress refused: "+reason)
			rec.Verdict, rec.Reason = Refused, reason
			return
		}
		req.URL.Scheme, req.URL.Host, req.RequestURI = "https", host, ""
		resp, err := tr.RoundTrip(req.WithContext(g.ctx))
		if err != nil {
			g.cfg.Logger.Debug("egress: brokered request", "sandbox", g.cfg.Sandbox, "host", h.name, "err", err)
			writeStatus(tc, http.StatusBadGateway, "egress: upstream unreachable")
			rec.Verdict, rec.Reason = Failed, "unreachable"
			return
		}
		err = resp.Write(tc)
		resp.Body.Close()
		if err != nil || req.Close || resp.Close {
			return
		}
	}
}

func writeStatus(w io.Writer, status int, msg string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), len(msg)+1, msg)
}

// countConn reads r (the bytes peeked, then the connection), and counts and meters both ways.
type countConn struct {
	net.Conn
	g       *Gateway
	r       io.Reader
	in, out atomic.Int64
	spent   atomic.Bool // the Meter refused
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.in.Add(int64(n))
	return n, c.metered(n, true, err)
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, c.metered(n, false, err)
}

func (c *countConn) metered(n int, up bool, err error) error {
	if merr := c.g.meter(int64(n), up); merr != nil {
		c.spent.Store(true)
		if err == nil {
			return merr
		}
	}
	return err
}
