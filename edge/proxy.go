package edge

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/wire"
)

type proxyTarget struct {
	entry registry.Entry
}

// serveSandbox relays /v1/sandbox/* and /v1/sessions[/*] (relayedPath) to the user's runner: same path and query, the runner's key instead of
// the user's token, bodies streamed both ways (exec output and file bodies are never buffered whole).
func (e *Edge) serveSandbox(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	route := routeLabel(r.URL.Path)
	sw := httpx.NewStatusWriter(w)
	defer func() {
		e.m.requests.WithLabelValues(route, strconv.Itoa(sw.Status())).Inc()
		e.m.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}()
	a, err := e.admitChecked(r)
	if err != nil {
		wire.WriteHTTPError(sw, e.log.With("request_id", httpx.RequestID(r.Context())), err)
		return
	}
	// The runner may answer (SSE headers of a streamed exec, an early error on an upload) while the request
	// body is still being forwarded. HTTP/1 servers close an unread request body once the response starts,
	// which would cut the forwarding mid-way and make the transport drop the runner connection; a proxy
	// must be full duplex.
	_ = http.NewResponseController(w).EnableFullDuplex()
	// The relay's transport reads the body in a goroutine that may outlive this handler: the guard ends
	// its reading before the handler returns (bodyGuard).
	g := guardBody(r, sw, nil)
	defer g.finish()
	if a.owner != "" {
		e.proxyForward(sw, r, a, g)
		return
	}
	e.proxyToRunner(sw, r, a, g)
}

func (e *Edge) serveRegions(w http.ResponseWriter, r *http.Request) {
	var list []regions.Status
	if e.cfg.Directory != nil {
		// Unauthenticated: answered from the edge's cache of the directory (read at most every 2 s, one
		// read at a time), so a flood of requests cannot take database connections from admission; when
		// a read fails, the entries of the last list that have not expired yet still answer.
		edges, err := e.peers.list(r.Context(), peerCacheTTL)
		if err != nil && edges == nil {
			wire.WriteHTTPError(w, e.log.With("request_id", httpx.RequestID(r.Context())), wire.Wrap(wire.Unavailable, err, "the region directory is unavailable"))
			return
		}
		now := time.Now()
		list = regions.Summarize(slices.DeleteFunc(slices.Clone(edges), func(x regions.Edge) bool { return !x.Expires.After(now) }))
	}
	if !slices.ContainsFunc(list, func(s regions.Status) bool { return s.Name == e.cfg.Region }) {
		// This edge serves whether or not its region's announcement is in the directory yet.
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		self := regions.Status{Name: e.cfg.Region, URL: scheme + "://" + r.Host, Health: "ok", Edges: 1}
		if wt := e.cfg.WebTransport; wt != nil {
			self.WebTransport = wt.URL
		}
		list = append(list, self)
		slices.SortFunc(list, func(a, b regions.Status) int { return strings.Compare(a.Name, b.Name) })
	}
	if wt := e.cfg.WebTransport; wt != nil && wt.CertificateHashes != nil {
		// Only this edge knows its self-signed certificate: published on its own region's entry.
		for i := range list {
			if list[i].Name == e.cfg.Region && list[i].WebTransport != "" {
				list[i].CertificateHashes = wt.CertificateHashes()
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"region": e.cfg.Region, "regions": list})
}

func routeLabel(path string) string {
	switch {
	case path == "/v1/sandbox/exec":
		return "exec"
	case path == "/v1/sandbox/files/list":
		return "files_list"
	case strings.HasPrefix(path, "/v1/sandbox/files"):
		return "files"
	case path == "/v1/sandbox/procs" || strings.HasPrefix(path, "/v1/sandbox/procs/"):
		return "procs"
	case path == "/v1/sandbox/terminals" || strings.HasPrefix(path, "/v1/sandbox/terminals/"):
		return "terminals"
	case path == "/v1/sessions" || strings.HasPrefix(path, "/v1/sessions/"):
		return "sessions"
	default:
		return "other"
	}
}

// relayedPath reports whether a path is one the edge relays to the user's runner (and forwards across
// regions): the sandbox API and the session listing.
func relayedPath(path string) bool {
	return strings.HasPrefix(path, "/v1/sandbox/") || path == "/v1/sessions" || strings.HasPrefix(path, "/v1/sessions/") ||
		path == "/v1/execute" || strings.HasPrefix(path, "/v1/execute/")
}
