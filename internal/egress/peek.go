package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
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
)

// httpMethods are the first words of an HTTP/1 request ("PRI" of HTTP/2 prior knowledge is not: it names
// no host, and is judged by its address).
var httpMethods = []string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "TRACE ", "CONNECT "}

// peek reads the start of c: a TLS ClientHello (parsed by crypto/tls) or an HTTP request head (parsed by
// net/http). A client that sends nothing within timeout (a protocol where the server speaks first) is
// judged by its address; a timeout of 0 waits as long as it takes. An error means a hello or head that is cut short, malformed or too large.
func peek(c net.Conn, timeout time.Duration) (hello, error) {
	rec := &recorder{r: c}
	if timeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(timeout))
		defer c.SetReadDeadline(time.Time{})
	}
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return hello{}, nil
		}
		return hello{buf: rec.buf}, err
	}
	switch {
	case first[0] == 0x16: // a TLS handshake record
		return peekTLS(rec)
	case first[0] >= 'A' && first[0] <= 'Z':
		return peekHTTP(rec)
	default:
		return hello{buf: rec.buf}, nil
	}
}

func peekTLS(rec *recorder) (hello, error) {
	h := hello{proto: "tls"}
	seen := false
	conf := &tls.Config{GetConfigForClient: func(ch *tls.ClientHelloInfo) (*tls.Config, error) {
		seen = true
		h.name, _ = NormalName(ch.ServerName)
		return nil, errHelloSeen
	}}
	err := tls.Server(&helloConn{r: io.MultiReader(bytes.NewReader(rec.buf), rec)}, conf).Handshake()
	h.buf = rec.buf
	if !seen {
		return h, err
	}
	return h, nil
}

func peekHTTP(rec *recorder) (hello, error) {
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rec.buf), rec), 4096)
	start, _ := br.Peek(len("OPTIONS "))
	if !isMethod(start) {
		// Bytes a protocol that is not HTTP sent first (say "SSH-2.0-"): judged by its address.
		return hello{buf: rec.buf}, nil
	}
	req, err := http.ReadRequest(br)
	h := hello{proto: "http", buf: rec.buf}
	if err != nil {
		return h, err
	}
	h.method = req.Method
	h.name = hostName(req.Host)
	if req.URL.Host != "" {
		// Absolute form: net/http judges by the request line's host, but a server may read the Host
		// line. Both must name the same host.
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(h.buf)))
		_, _ = tp.ReadLine()
		hdr, _ := tp.ReadMIMEHeader()
		if v := hdr.Get("Host"); v != "" && hostName(v) != h.name {
			return h, errHostMismatch
		}
	}
	return h, nil
}

// hostName is the normal name of an HTTP host (with or without a port); "" for an address.
func hostName(host string) string {
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	n, _ := NormalName(host)
	return n
}

func isMethod(start []byte) bool {
	return slices.ContainsFunc(httpMethods, func(m string) bool { return strings.HasPrefix(string(start), m) })
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
