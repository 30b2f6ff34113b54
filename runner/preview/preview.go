// Package preview is the runner's preview relay (docs/ARCHITECTURE.md#previews): the edge, having verified
// a preview URL, sends the request to /v1/preview/{port}/{path...} with the runner's key; the runner relays
// it, HTTP or WebSocket, to port on the sandbox's own loopback (inside its network namespace; with the
// host network, the host's loopback). The edge passes what it keeps of the client's request in the
// previews.*Header headers; nothing else of the edge's (the runner's key, the grant, any X-Warren-*
// header) reaches the sandbox.
package preview

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/previews"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/isolate"
)

// maxPreviewConns bounds the preview requests (WebSocket connections included) a runner relays at once.
const maxPreviewConns = 256

// Host is what the relay uses of the runner. Its methods may be called concurrently.
type Host interface {
	// OwnPort reports whether port is one the runner itself listens on (its API, its model proxy): never
	// relayed, even where the sandbox shares the host's network or reaches the port through pasta.
	OwnPort(port int) bool
	// Network is the sandbox's own network namespace; nil when it shares the host's network.
	Network() *isolate.Network
}

// Config is what the relay is built with.
type Config struct {
	Host    Host
	Metrics prometheus.Registerer
	// HostLoopback lets a sandbox sharing the host's network be previewed on the host's loopback
	// (-preview-host-loopback, development only).
	HostLoopback bool
}

// Relay relays preview requests to the sandbox. Create it with New.
type Relay struct {
	cfg   Config
	proxy *httputil.ReverseProxy
	slots chan struct{}
	reqs  *prometheus.CounterVec
}

// New makes the relay and registers its metrics in cfg.Metrics.
func New(cfg Config) *Relay {
	p := &Relay{cfg: cfg, slots: make(chan struct{}, maxPreviewConns), reqs: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_runner_preview_requests_total",
		Help: "Requests relayed to a port of the sandbox for a preview URL, by result (ok, refused, unreachable, busy).",
	}, []string{"result"})}
	cfg.Metrics.MustRegister(p.reqs)
	p.proxy = &httputil.ReverseProxy{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         p.dial,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     30 * time.Second,
		},
		FlushInterval: -1,
		Rewrite:       p.rewrite,
		// A port that answered (below 500) is ok; one that did not is counted by ErrorHandler.
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode < 500 {
				p.reqs.WithLabelValues("ok").Inc()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return
			}
			p.reqs.WithLabelValues("unreachable").Inc()
			var we *wire.Error
			if !errors.As(err, &we) {
				we = wire.Wrap(wire.Unavailable, err, "nothing answers on that port of the sandbox")
			}
			web.Fail(w, req, we)
		},
	}
	return p
}

// Routes mounts the relay on s.
func (p *Relay) Routes(s web.Serve) { s.Handle("/v1/preview/", http.HandlerFunc(p.serve)) }

// Busy is false: a relayed request keeps the sandbox awake as any request does.
func (*Relay) Busy(time.Time) bool { return false }

// Close has nothing to end: relayed requests end with the server's drain.
func (*Relay) Close(context.Context) error { return nil }

func (p *Relay) serve(w http.ResponseWriter, req *http.Request) {
	rest := strings.TrimPrefix(req.URL.EscapedPath(), "/v1/preview/")
	portS, _, _ := strings.Cut(rest, "/")
	port, ok := previews.ParsePort(portS)
	if !ok {
		p.reqs.WithLabelValues("refused").Inc()
		web.Fail(w, req, wire.Errorf(wire.InvalidArgument, "a preview port is 1 to 65535"))
		return
	}
	if p.cfg.Host.OwnPort(port) {
		p.reqs.WithLabelValues("refused").Inc()
		web.Fail(w, req, wire.Errorf(wire.PermissionDenied, "port %d is the runner's own, not the sandbox's", port))
		return
	}
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		p.reqs.WithLabelValues("busy").Inc()
		web.Fail(w, req, wire.Errorf(wire.ResourceExhausted, "too many preview connections to this sandbox at once (%d)", maxPreviewConns))
		return
	}
	p.proxy.ServeHTTP(w, req)
}

// rewrite makes the request the sandbox's server sees: the path after the port, the query, the client's
// own headers; Host is localhost:port (what a development server expects), the public host goes in
// X-Forwarded-Host.
func (p *Relay) rewrite(pr *httputil.ProxyRequest) {
	in := pr.In
	rest := strings.TrimPrefix(in.URL.EscapedPath(), "/v1/preview/")
	portS, path, _ := strings.Cut(rest, "/")
	path = "/" + path
	host := "localhost:" + portS
	out := pr.Out
	out.URL = &url.URL{Scheme: "http", Host: host, RawQuery: in.URL.RawQuery}
	if u, err := url.PathUnescape(path); err == nil {
		out.URL.Path, out.URL.RawPath = u, path
	} else {
		out.URL.Path = path
	}
	out.Host = host
	cookie := in.Header.Get(previews.CookieHeader)
	fwdHost, fwdProto, fwdPrefix := in.Header.Get(previews.HostHeader), in.Header.Get(previews.ProtoHeader), in.Header.Get(previews.PrefixHeader)
	for k := range out.Header {
		// Warren's own, and every forwarding header of the visitor's (ReverseProxy drops only Forwarded and
		// X-Forwarded-For, -Host and -Proto): the server trusts only what the edge said.
		if strings.HasPrefix(strings.ToLower(k), "x-warren-") || previews.ForwardingHeader(k) {
			out.Header.Del(k)
		}
	}
	out.Header.Del("Authorization") // the runner's key
	out.Header.Del("Cookie")
	if cookie != "" {
		out.Header.Set("Cookie", cookie)
	}
	for k, v := range map[string]string{"X-Forwarded-Host": fwdHost, "X-Forwarded-Proto": fwdProto, "X-Forwarded-Prefix": fwdPrefix} {
		if v != "" {
			out.Header.Set(k, v)
		}
	}
}

// dial connects to the port of addr ("localhost:port", set by rewrite) on the sandbox's loopback.
func (p *Relay) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	_, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, ok := previews.ParsePort(portS)
	if !ok || p.cfg.Host.OwnPort(port) {
		return nil, wire.Errorf(wire.PermissionDenied, "port %s is not the sandbox's", portS)
	}
	var c net.Conn
	if n := p.cfg.Host.Network(); n != nil {
		c, err = n.DialLoopback(ctx, port)
	} else {
		if !p.cfg.HostLoopback {
			return nil, wire.Errorf(wire.Unavailable, "preview URLs need the sandbox's own network: this runner shares the host's (-sandbox-network=host or -insecure-no-sandbox; -preview-host-loopback allows it, for development only)")
		}
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", portS))
	}
	if err != nil {
		return nil, wire.Wrap(wire.Unavailable, err, "nothing listens on port "+portS+" of the sandbox")
	}
	return c, nil
}
