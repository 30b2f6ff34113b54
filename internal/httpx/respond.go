package httpx

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// StatusWriter records the status of the answer written through it, for logs and metrics. Unwrap lets
// http.ResponseController (flushing, deadlines) and WebSocket upgrades (hijacking) reach the writer below.
type StatusWriter struct {
	http.ResponseWriter
	status int
}

// NewStatusWriter wraps w.
func NewStatusWriter(w http.ResponseWriter) *StatusWriter { return &StatusWriter{ResponseWriter: w} }

// Status is the answer's status: the first final status written (or 101, a WebSocket's), else 200, which
// is what http.Server answers for a handler that writes nothing.
func (s *StatusWriter) Status() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// WriteHeader records code unless a final status was written already.
func (s *StatusWriter) WriteHeader(code int) {
	if s.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write writes b, recording 200 when no status was written.
func (s *StatusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush flushes the writer below, for code that asserts http.Flusher rather than using a
// ResponseController.
func (s *StatusWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// Unwrap is the writer below.
func (s *StatusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// WriteJSON answers v as JSON with status. The answer is never cached (answers carry quotas, tokens and
// sandbox state) nor sniffed. A failed write is a client gone: its error is for callers that count those.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// Events writes a stream of server-sent events (text/event-stream), flushing each.
type Events struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// StartEvents commits w to a stream of server-sent events: 200, not cached, not buffered by proxies
// (X-Accel-Buffering), headers flushed at once so the client knows the stream started.
func StartEvents(w http.ResponseWriter) *Events {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &Events{w: w, rc: http.NewResponseController(w)}
	_ = e.rc.Flush()
	return e
}

// Send writes one event named event whose data is v as JSON (one line: JSON holds no raw newline), and
// flushes it. A v that cannot be marshalled is sent as an internal wire error. An error is the client gone.
func (e *Events) Send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"code":"internal","message":"internal error"}`)
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// KeepAliveEvery is how often a stream with nothing to say should Ping, so proxies and load balancers
// do not close it as idle.
const KeepAliveEvery = 15 * time.Second

// Ping writes an SSE comment (": keep-alive"), which clients skip, and flushes it. An error is the client
// gone.
func (e *Events) Ping() error {
	if _, err := io.WriteString(e.w, ": keep-alive\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}
