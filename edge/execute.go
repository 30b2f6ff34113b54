package edge

import (
	"net/http"
	"strconv"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
)

// serveExecute relays the one-shot task API (POST /v1/execute, GET /v1/execute[/{id}];
// docs/PROTOCOL.md#tasks) to the user's runner like the sandbox API. The runner runs the task in its agent
// session machinery and keeps the record in the blob store; a task is a prompt, so POST takes from the
// prompt rates as a chat prompt does.
func (e *Edge) serveExecute(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := httpx.NewStatusWriter(w)
	defer func() {
		e.m.requests.WithLabelValues("execute", strconv.Itoa(sw.Status())).Inc()
		e.m.latency.WithLabelValues("execute").Observe(time.Since(start).Seconds())
	}()
	log := e.log.With("request_id", httpx.RequestID(r.Context()))
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		httpx.MethodNotAllowed(sw, r, []string{http.MethodGet, http.MethodPost})
		return
	}
	a, err := e.admit(r.Context(), r, false)
	if err != nil {
		wire.WriteHTTPError(sw, log, err)
		return
	}
	if r.Method == http.MethodPost {
		if refused := e.admitPrompt(r.Context(), a); refused != nil {
			wire.WriteHTTPError(sw, log, refused)
			return
		}
	}
	g := guardBody(r, sw, nil) // the body is not read once this returns (bodyGuard)
	defer g.finish()
	if a.owner != "" {
		e.proxyForward(sw, r, a, g)
		return
	}
	e.proxyToRunner(sw, r, a, g)
}
