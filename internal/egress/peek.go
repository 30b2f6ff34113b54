package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"time"
)

// maxPeek bounds what the gateway reads of a connection before deciding: a TLS ClientHello or an HTTP
// request's head.
const maxPeek = 16 << 10

// hello is what the gateway learnt from a connection's first bytes.
type hello struct {
	proto  string // "tls", "http" or "" (anything else, or nothing sent in time)
	name   string // the SNI or Host, normalised; "" when none or an address literal
	method string // the HTTP method
	buf    []byte // every byte read, to be sent on first
}

var (
	errHelloSeen = errors.New("client hello seen")
	errPeekLimit = errors.New("hello or request head too large")
	// errHostMismatch: a request line naming one host and a Host line another.
	errHostMismatch = errors.New("request line and Host name different hosts")
	// errBadName: an SNI or Host that is neither a host name nor an address.
	errBadName = errors.New("server name or Host neither a host name nor an address")
	// errNotHello: a TLS record other than a handshake first (a server may skip it and take a
	// ClientHello after it, unjudged).
	errNotHello = errors.New("TLS record before the ClientHello")
	// errCutShort: what may be the start of an HTTP request line, not ended when the peek gave up.
	errCutShort = errors.New("request line cut short")
)

// h2Preface is the request line of HTTP/2 with prior knowledge: it names no host, and is judged by its
// address.
const h2Preface = "PRI * HTTP/2.0"

// peek reads the start of c: a TLS ClientHello (parsed by crypto/tls) or an HTTP request head (parsed by
// net/http). A client that sends nothing within timeout (a protocol where the server speaks first) is
// judged by its address; a timeout of 0 waits as long as it takes. An error means a hello or head that
// is cut short, malformed or too large, or a name that is no host name.
func peek(c net.Conn, timeout time.Duration) (hello, error) {
	rec := &recorder{r: c}
	if timeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(timeout))
		defer c.SetReadDeadline(time.Time{})
	}
	var first [2]byte
	if _, err := io.ReadFull(rec, first[:1]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return hello{}, nil
		}
		return hello{buf: rec.buf}, err
	}
	switch {
	case first[0] == 0x16: // a TLS handshake record
		return peekTLS(rec)
	case first[0] >= 0x14 && first[0] <= 0x18: // another TLS record type, if a TLS version follows
		if _, err := io.ReadFull(rec, first[1:]); err == nil && first[1] == 3 {
			return hello{proto: "tls", buf: rec.buf}, errNotHello
		}
		return hello{buf: rec.buf}, nil
	case first[0] == '\r' || first[0] == '\n' || isToken(first[0]):
		return peekHTTP(rec)
	default:
		return hello{buf: rec.buf}, nil
	}
}

func peekTLS(rec *recorder) (hello, error) {
	h := hello{proto: "tls"}
	seen, ok := false, false
	conf := &tls.Config{GetConfigForClient: func(ch *tls.ClientHelloInfo) (*tls.Config, error) {
		seen = true
		h.name, ok = serverName(ch.ServerName)
		return nil, errHelloSeen
	}}
	err := tls.Server(&helloConn{r: io.MultiReader(bytes.NewReader(rec.buf), rec)}, conf).Handshake()
	h.buf = rec.buf
	switch {
	case !seen:
		return h, err
	case !ok:
		return h, errBadName
	}
	return h, nil
}

// peekHTTP reads an HTTP/1 request head, if the first line is a request line: any method (a server
// takes any token), any case; an empty line first (which a server may skip) is malformed. A first line
// that is not a request line is another protocol's, judged by its address; one that could still become
// a request line when the peek gave up is refused (else a client sends "GE", waits, and names any host
// after).
func peekHTTP(rec *recorder) (hello, error) {
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rec.buf), rec), 4096)
	var line []byte
	for len(line) == 0 || line[len(line)-1] != '\n' {
		c, err := br.ReadByte()
		if err != nil {
			return hello{proto: "http", buf: rec.buf}, errors.Join(errCutShort, err)
		}
		if c < ' ' && c != '\r' && c != '\n' || c > '~' {
			// Bytes a protocol that is not HTTP sent first (binary): judged by its address, at once.
			return hello{buf: rec.buf}, nil
		}
		line = append(line, c)
	}
	if t := strings.TrimRight(string(line), "\r\n"); t != "" && (!isRequestLine(t) || t == h2Preface) {
		// A line of a protocol that is not HTTP (say "SSH-2.0-"): judged by its address.
		return hello{buf: rec.buf}, nil
	}
	br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rec.buf), rec), 4096)
	req, err := http.ReadRequest(br)
	h := hello{proto: "http", buf: rec.buf}
	if err != nil {
		return h, err
	}
	h.method = req.Method
	var ok bool
	if h.name, ok = hostName(req.Host); !ok {
		return h, errBadName
	}
	if req.URL.Host != "" {
		// Absolute form: net/http judges by the request line's host, but a server may read the Host
		// line. Both must name the same host.
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(h.buf)))
		_, _ = tp.ReadLine()
		hdr, _ := tp.ReadMIMEHeader()
		if v := hdr.Get("Host"); v != "" {
			if n, ok := hostName(v); !ok || n != h.name {
				return h, errHostMismatch
			}
		}
	}
	return h, nil
}

// isRequestLine reports whether line (without its line break) is an HTTP request line: a method, a
// target and a version, whatever their case.
func isRequestLine(line string) bool {
	f := strings.Split(line, " ")
	return len(f) >= 3 && f[0] != "" && strings.HasPrefix(strings.ToUpper(f[len(f)-1]), "HTTP/")
}

// isToken reports whether c is a character of an HTTP token (RFC 9110 5.6.2), a method's.
func isToken(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// hostName is the normal name of an HTTP host (with or without a port): "" and true for none or an
// address, false for what is neither a host name nor an address (a server may still route by it).
func hostName(host string) (string, bool) {
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	return serverName(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

// serverName is the normal form of a name the client sent (an SNI, a Host without its port): "" and
// true for none or an address, false for what is neither.
func serverName(name string) (string, bool) {
	if name == "" {
		return "", true
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return "", true
	}
	return NormalName(name)
}

// recorder reads from r, keeping every byte read (at most maxPeek).
type recorder struct {
	r   io.Reader
	buf []byte
}

func (r *recorder) Read(p []byte) (int, error) {
	if len(r.buf) >= maxPeek {
		return 0, errPeekLimit
	}
	p = p[:min(len(p), maxPeek-len(r.buf))]
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// helloConn feeds crypto/tls the bytes read and swallows what it writes back (the alert ending the
// handshake the gateway stopped).
type helloConn struct {
	r io.Reader
	net.Conn
}

func (c *helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
