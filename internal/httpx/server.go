// Package httpx is the HTTP plumbing every role shares. NewServer and NewHTTP3Server build the server behind
// every listener Warren opens (the edge, scheduler and billing roles, a runner and its model proxy, `warren
// dev`, a warm runner), so each closes slow and idle clients the same way in development and production.
//
// The rest is what every role's HTTP API repeats, written once so the copies cannot drift: the bearer rule
// and constant-time key compares (Bearer, KeyEqual, KeyIn), the request id rule and middleware (RequestIDs),
// a status-recording writer, JSON and server-sent-event writers, and a mux whose own 404 and 405 answers are
// wire errors (Mux, Methods). docs/PROTOCOL.md states each rule.
package httpx

import (
	"cmp"
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Defaults of Config.
const (
	// DefaultReadHeaderTimeout bounds how long a client may take to send a request's headers, the first
	// request of a connection included: a connection that sends nothing is closed after it.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection (an HTTP/3 one: a connection with no stream open)
	// that has had no request in flight for this long.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's headers (Go's own default is 1 MiB). A token is at most
	// 8 KiB (internal/token.DefaultMaxSize); the rest is a browser's cookies and the usual headers.
	DefaultMaxHeaderBytes = 64 << 10
)

// Config is a listener's limits; zero fields take the defaults.
type Config struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// ReadTimeout and WriteTimeout bound a whole request and a whole response. Zero is none, which every
	// role but a warm runner needs: they stream (SSE, WebSockets, preview relays, long waits and uploads),
	// and a handler that waits bounds its own wait.
	ReadTimeout, WriteTimeout time.Duration
	MaxHeaderBytes            int
	// Logger receives the server's own errors (failed TLS handshakes, handler panics) at warn level; nil
	// leaves them to the standard logger.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.MaxHeaderBytes = cmp.Or(c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	return c
}

// NewServer returns the server of h with c's limits. The caller may set BaseContext, ConnState and the
// like before serving; the limits are what every listener shares.
func NewServer(h http.Handler, c Config) *http.Server {
	c = c.withDefaults()
	s := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
	}
	if c.Logger != nil {
		s.ErrorLog = slog.NewLogLogger(c.Logger.Handler(), slog.LevelWarn)
	}
	return s
}

// NewHTTP3Server returns the HTTP/3 server of h with c's idle timeout (at the HTTP/3 layer: a connection
// with no stream open, whatever its QUIC keep-alives) and header bound, over tlsConf (made ready for
// HTTP/3 here) and q. HTTP/3 has no header, read or write timeouts of its own: q's HandshakeIdleTimeout
// and MaxIdleTimeout bound a silent peer, and a handler bounds its own streams.
func NewHTTP3Server(h http.Handler, tlsConf *tls.Config, q *quic.Config, c Config) *http3.Server {
	c = c.withDefaults()
	return &http3.Server{
		TLSConfig:      http3.ConfigureTLSConfig(tlsConf),
		QUICConfig:     q,
		Handler:        h,
		IdleTimeout:    c.IdleTimeout,
		MaxHeaderBytes: c.MaxHeaderBytes,
		Logger:         c.Logger,
	}
}
