package edge

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// errBodyDone is what a relay's transport reads from a request body once its handler has returned.
var errBodyDone = errors.New("the request is over: its body is no longer read")

// bodyGuard is a relayed request body (the client's at serveSandbox, a mesh stream at serveForwardedHTTP):
// the relay's transport reads it in a goroutine of its own (http.Transport's write loop, the mesh
// transport's copy), which may outlive the handler, and net/http forbids reading a request body once the
// handler has returned. With full duplex on, its server then reads the next request while the transport
// still reads (or, when nothing read the body, reads it to its end itself after the handler), and panics
// ("invalid concurrent Body.Read call", golang/go#68560), dropping the client's connection.
//
// So the handler ends with finish: no Read starts after it, and a Read in progress is cut (cut: a read
// deadline in the past) and waited for. The cut never waits for the client, so an answer given before
// the body's end (a runner answering early) cannot deadlock. A body not read to its end when the answer
// is given (answering) or when the handler ends makes it the last one on the client's connection
// (Connection: close): its rest is never read, and a cut fails the connection's later reads.
// Close does nothing: the server closes the body it owns after the handler.
type bodyGuard struct {
	rc     io.ReadCloser
	cut    func()      // makes a Read in progress of rc return at once
	header http.Header // of the answer on the client's connection; nil over the mesh

	mu      sync.Mutex
	idle    *sync.Cond // signalled when a Read ends
	reading bool       // a Read of rc is in progress (the transport reads one at a time)
	eof     bool       // rc was read to its end
	done    bool       // finish was called
}

// guardBody replaces r.Body (when it has one) with a bodyGuard; nil when there is no body. On an HTTP/1
// server's connection, w is the handler's writer; over the mesh, w is nil and cut cuts the stream's read.
func guardBody(r *http.Request, w http.ResponseWriter, cut func()) *bodyGuard {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	g := &bodyGuard{rc: r.Body, cut: cut}
	if w != nil {
		g.header = w.Header()
		rc := http.NewResponseController(w)
		g.cut = func() { _ = rc.SetReadDeadline(time.Unix(1, 0)) }
	}
	g.idle = sync.NewCond(&g.mu)
	r.Body = g
	return g
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	g.mu.Lock()
	switch {
	case g.done:
		g.mu.Unlock()
		return 0, errBodyDone
	case g.eof:
		g.mu.Unlock()
		return 0, io.EOF
	}
	g.reading = true
	g.mu.Unlock()
	n, err := g.rc.Read(p)
	g.mu.Lock()
	g.reading = false
	if err == io.EOF {
		g.eof = true
	}
	g.idle.Broadcast()
	g.mu.Unlock()
	return n, err
}

func (g *bodyGuard) Close() error { return nil }

// pending reports whether the body has not been read to its end (false without a body).
func (g *bodyGuard) pending() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.eof
}

// answering is called with the head of the answer about to be written on the client's connection: while
// the body is pending, the answer closes the connection.
func (g *bodyGuard) answering(h http.Header) {
	if g != nil && g.header != nil && g.pending() {
		h.Set("Connection", "close")
	}
}

// finish ends the body's reading before the handler returns: later Reads fail with errBodyDone, a Read
// in progress is cut and waited for. Idempotent; a no-op without a body.
func (g *bodyGuard) finish() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	if g.eof {
		return // never cut a body read to its end: the server is already reading the next request
	}
	if g.header != nil {
		// An answer not written yet (the server writes an empty one) closes the connection; one written
		// while the body was pending said so already (answering).
		g.header.Set("Connection", "close")
	}
	if g.reading {
		g.cut()
		for g.reading {
			g.idle.Wait()
		}
	}
}
