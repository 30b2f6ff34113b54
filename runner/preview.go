package runner

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/previews"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/isolate"
)

// Preview relay (docs/ARCHITECTURE.md#previews): the edge, having verified a preview URL, sends the request
// to /v1/preview/{port}/{path...} with the runner's key; the runner relays it, HTTP or WebSocket, to port on
// the sandbox's own loopback (inside its network namespace; with the host network, the host's loopback).
// The edge passes what it keeps of the client's request in the previews.*Header headers; nothing else of
// the edge's (the runner's key, the grant, any X-Warren-* header) reaches the sandbox.

// maxPreviewConns bounds the preview requests (WebSocket connections included) a runner relays at once.
const maxPreviewConns = 256

type previewRelay struct {
	a     *api
	proxy *httputil.ReverseProxy
	slots chan struct{}
	reqs  *prometheus.CounterVec
}

func (a *api) previewRoutes(s web.Serve) {
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_runner_preview_requests_total",
		Help: "Requests relayed to a port of the sandbox for a preview URL, by result (ok, refused, unreachable, busy).",
	}, []string{"result"})
	if err := a.r.metrics.reg.Register(reqs); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			reqs = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	p := &previewRelay{a: a, slots: make(chan struct{}, maxPreviewConns), reqs: reqs}
	p.proxy = &httputil.ReverseProxy{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         p.dial,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     30 * time.Second,
		},
		FlushInterval: -1,
		Rewrite:       p.rewrite,
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
	s.Handle("/v1/preview/", http.HandlerFunc(p.serve))
}

func (p *previewRelay) serve(w http.ResponseWriter, req *http.Request) {
	rest := strings.TrimPrefix(req.URL.EscapedPath(), "/v1/preview/")
	portS, _, _ := strings.Cut(rest, "/")
	port, ok := previews.ParsePort(portS)
	if !ok {
		p.reqs.WithLabelValues("refused").Inc()
		web.Fail(w, req, wire.Errorf(wire.InvalidArgument, "a preview port is 1 to 65535"))
		return
	}
	if p.a.r.ownPort(port) {
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
	sw := &statusWriter{ResponseWriter: w}
	p.proxy.ServeHTTP(sw, req)
	if sw.status > 0 && sw.status < 500 {
		p.reqs.WithLabelValues("ok").Inc()
	}
}

// rewrite makes the request the sandbox's server sees: the path after the port, the query, the client's
// own headers; Host is localhost:port (what a development server expects), the public host goes in
// X-Forwarded-Host.
func (p *previewRelay) rewrite(pr *httputil.ProxyRequest) {
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
func (p *previewRelay) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	_, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, ok := previews.ParsePort(portS)
	if !ok || p.a.r.ownPort(port) {
		return nil, wire.Errorf(wire.PermissionDenied, "port %s is not the sandbox's", portS)
	}
	var c net.Conn
	if n := p.a.r.network(); n != nil {
		c, err = n.DialLoopback(ctx, port)
	} else {
		if !p.a.r.cfg.PreviewHostLoopback {
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

// ownPort reports whether port is one the runner itself listens on (its API, its model proxy): never
// relayed, even where the sandbox shares the host's network or reaches the port through pasta.
func (r *Runner) ownPort(port int) bool {
	own := []string{}
	if a := r.addr.Load(); a != nil {
		own = append(own, *a)
	}
	if r.agent != nil && r.agent.proxyURL != "" {
		if u, err := url.Parse(r.agent.proxyURL); err == nil {
			own = append(own, u.Host)
		}
	}
	for _, hp := range own {
		if _, ps, err := net.SplitHostPort(hp); err == nil && ps == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// network is the sandbox's own network namespace; nil when it shares the host's network.
func (r *Runner) network() *isolate.Network {
	if r.parts == nil {
		return nil
	}
	return r.parts.network
}
