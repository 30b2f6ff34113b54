package devstack

import (
	"net/http"
	"strings"

	"github.com/warren-mesh/warren/internal/playground"
)

// landingPage is what a browser gets on / of warren dev: where everything is.
const landingPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>warren dev</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:44em;margin:3em auto;padding:0 1em}code{font-size:90%}</style>
</head><body>
<h1>warren dev</h1>
<p>Every role of Warren in one process, for development. Production edges have no such page.</p>
<ul>
<li><a href="` + playground.Prefix + `">Playground</a>: chat with the agent, browse files and run commands in a sandbox</li>
<li><a href="/metrics">Metrics</a> (Prometheus)</li>
<li><a href="/v1/regions">Regions</a>; the billing API's OpenAPI document is <code>/v1/openapi.json</code>
(with the admin key: <code>warren admin</code> reads it from <code>./.warren</code>)</li>
<li>Docs: <code>README.md</code> (the five-minute tour), <code>docs/PROTOCOL.md</code> (the API) and
<code>docs/ARCHITECTURE.md</code> in the repository</li>
</ul>
<p>From a shell: <code>export WARREN_TOKEN=$(warren token -user alice)</code>, then
<code>warren exec -- echo hi</code> or <code>warren chat</code>.</p>
</body></html>
`

// landing answers a browser's plain GET of / with landingPage and hands every other request of / (the
// agent channel's WebSocket upgrade, API clients) to next, the edge.
func landing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" || !strings.Contains(r.Header.Get("Accept"), "text/html") {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(landingPage))
	})
}
