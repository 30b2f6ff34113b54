package procs

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
)

// Routes of the background process API (docs/PROTOCOL.md#processes):
//
//	POST   /v1/sandbox/procs              start (wire.ProcStartRequest) → 201 wire.ProcInfo
//	GET    /v1/sandbox/procs              list → wire.ProcList
//	GET    /v1/sandbox/procs/{id}         → wire.ProcInfo
//	DELETE /v1/sandbox/procs/{id}         forget an exited process → 204
//	POST   /v1/sandbox/procs/{id}/signal  wire.ProcSignalRequest → wire.ProcInfo
//	POST   /v1/sandbox/procs/{id}/stdin   raw bytes [?close=true] → 204
//	GET    /v1/sandbox/procs/{id}/logs    [?offset=N] → wire.ProcLogs, or SSE with Accept: text/event-stream
//	POST   /v1/sandbox/procs/{id}/wait    wire.ProcWaitRequest → wire.ProcWaitResult

// procPoll is how often a wait for a port looks at the sandbox's listening sockets.
const procPoll = 50 * time.Millisecond

// Routes mounts the process API on s.
func (t *Table) Routes(s web.Serve) {
	a := &api{t: t, s: s}
	s.Handle("/v1/sandbox/procs", httpx.Methods{http.MethodGet: a.listProcs, http.MethodPost: a.startProc})
	s.Handle("/v1/sandbox/procs/", web.ItemRoute("/v1/sandbox/procs/", map[string]http.Handler{
		"":       httpx.Methods{http.MethodGet: a.getProc, http.MethodDelete: a.deleteProc},
		"signal": httpx.Methods{http.MethodPost: a.signalProc},
		"stdin":  httpx.Methods{http.MethodPost: a.procStdin},
		"logs":   httpx.Methods{http.MethodGet: a.procLogs},
		"wait":   httpx.Methods{http.MethodPost: a.waitProc},
	}))
}

// api is the process API of one Run.
type api struct {
	t *Table
	s web.Serve
}

// procOf finds the request's process, answering not_found itself.
func (a *api) procOf(w http.ResponseWriter, req *http.Request) (*proc, bool) {
	p, err := a.t.procs.Get(req.PathValue("id"))
	if err != nil {
		web.Fail(w, req, err)
		return nil, false
	}
	return p, true
}

func (a *api) startProc(w http.ResponseWriter, req *http.Request) {
	var p *proc
	pr, err := wire.DecodeProcStart(req.Body)
	if err == nil {
		var dir string
		if dir, err = a.s.Root.Dir(pr.Cwd); err == nil {
			p, err = a.t.start(a.s.Work, dir, pr)
		}
	}
	if err := a.t.procs.Counted(err); err != nil {
		web.Fail(w, req, err)
		return
	}
	web.Logger(req).Info("process started by request", "process", p.id)
	_ = httpx.WriteJSON(w, http.StatusCreated, p.info())
}

func (a *api) listProcs(w http.ResponseWriter, req *http.Request) {
	_ = httpx.WriteJSON(w, http.StatusOK, wire.ProcList{Procs: a.t.list()})
}

func (a *api) getProc(w http.ResponseWriter, req *http.Request) {
	if p, ok := a.procOf(w, req); ok {
		_ = httpx.WriteJSON(w, http.StatusOK, p.info())
	}
}

func (a *api) deleteProc(w http.ResponseWriter, req *http.Request) {
	if err := a.t.remove(req.PathValue("id")); err != nil {
		web.Fail(w, req, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) signalProc(w http.ResponseWriter, req *http.Request) {
	p, ok := a.procOf(w, req)
	if !ok {
		return
	}
	var sr wire.ProcSignalRequest
	if err := wire.DecodeBody(req.Body, "signal request", &sr); err != nil {
		web.Fail(w, req, err)
		return
	}
	name, err := wire.ParseSignal(sr.Signal)
	if err == nil {
		err = p.signal(name)
	}
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	web.Logger(req).Info("process signalled", "process", p.id, "signal", name)
	_ = httpx.WriteJSON(w, http.StatusOK, p.info())
}

func (a *api) procStdin(w http.ResponseWriter, req *http.Request) {
	p, ok := a.procOf(w, req)
	if !ok {
		return
	}
	closeAfter, err := web.BoolQuery(req, "close")
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	if err := p.writeStdin(req.Context(), req.Body, closeAfter); err != nil {
		web.Fail(w, req, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// procLogs answers the kept output from ?offset= (default 0) as JSON, or with Accept: text/event-stream
// streams it: stdout and stderr events (data wire.ProcChunk) as output arrives, then one exit event (data
// wire.ProcInfo) once the process has exited and its output is complete. The stream ends when the client
// leaves; the process does not.
func (a *api) procLogs(w http.ResponseWriter, req *http.Request) {
	p, ok := a.procOf(w, req)
	if !ok {
		return
	}
	var off int64
	if v := req.URL.Query().Get("offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			web.Fail(w, req, wire.Errorf(wire.InvalidArgument, "offset must be a non-negative integer"))
			return
		}
		off = n
	}
	if !strings.Contains(req.Header.Get("Accept"), "text/event-stream") {
		chunks, next, _, _ := p.log.since(off)
		start, _ := p.log.bounds()
		if chunks == nil {
			chunks = []wire.ProcChunk{}
		}
		_ = httpx.WriteJSON(w, http.StatusOK, wire.ProcLogs{Start: max(off, start), Next: next, Chunks: chunks})
		return
	}
	release, err := a.t.follow(a.t.followers, "process logs streams and waits")
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	defer release()
	events := httpx.StartEvents(w)
	ping := time.NewTicker(httpx.KeepAliveEvery)
	defer ping.Stop()
	for {
		chunks, next, closed, wake := p.log.since(off)
		for _, c := range chunks {
			_ = events.Send(c.Stream, c)
		}
		off = next
		if closed {
			_ = events.Send(wire.EventExit, p.info())
			return
		}
		select {
		case <-wake:
		case <-ping.C:
			_ = events.Ping()
		case <-req.Context().Done():
			return
		}
	}
}

// waitProc waits, up to the request's timeout (default the runner's exec timeout, at most its maximum),
// for the process to exit, a port to listen or a log line to match. A process that exits before a port
// listens or a line matches is conflict; a timeout is timeout. Either way the process runs on.
func (a *api) waitProc(w http.ResponseWriter, req *http.Request) {
	p, ok := a.procOf(w, req)
	if !ok {
		return
	}
	wr, match, err := wire.DecodeProcWait(req.Body)
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	release, err := a.t.follow(a.t.followers, "process logs streams and waits")
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	defer release()
	if wr.For == wire.WaitPort {
		releasePort, err := a.t.follow(a.t.portWaits, "waits for a port")
		if err != nil {
			web.Fail(w, req, err)
			return
		}
		defer releasePort()
	}
	if wr.For == wire.WaitLog && wr.Regex {
		releaseRegex, err := a.t.follow(a.t.regexWaits, "waits for a regular expression")
		if err != nil {
			web.Fail(w, req, err)
			return
		}
		defer releaseRegex()
	}
	timeout := a.t.cfg.DefaultWait
	if wr.TimeoutMs > 0 {
		timeout = min(time.Duration(min(wr.TimeoutMs, a.t.cfg.MaxWait.Milliseconds()))*time.Millisecond, a.t.cfg.MaxWait)
	}
	ctx, cancel := context.WithTimeout(req.Context(), timeout)
	defer cancel()
	if m := match; m != nil {
		// Once the wait is over no further line is matched: a costly pattern stops within one line.
		match = func(line string) bool { return ctx.Err() == nil && m(line) }
	}
	var res wire.ProcWaitResult
	switch wr.For {
	case wire.WaitExit:
		select {
		case <-p.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	case wire.WaitPort:
		err = waitPort(ctx, p, uint16(wr.Port))
	case wire.WaitLog:
		res.Line, res.Offset, err = waitLog(ctx, p, wr.Offset, match)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && req.Context().Err() == nil:
		err = wire.Errorf(wire.Timeout, "process %s: the wait for %s timed out after %s", p.id, wr.For, timeout)
	case err != nil && req.Context().Err() != nil:
		err = wire.Wrap(wire.Unavailable, err, "the request ended")
	}
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	res.Proc = p.info()
	_ = httpx.WriteJSON(w, http.StatusOK, res)
}

func waitPort(ctx context.Context, p *proc, port uint16) error {
	if p.p == nil { // kept from before a sleep: exited
		return exitedBefore(p, "port "+strconv.Itoa(int(port))+" listened")
	}
	t := time.NewTicker(procPoll)
	defer t.Stop()
	for {
		if p.p.Listening(port) {
			return nil
		}
		select {
		case <-p.done:
			return exitedBefore(p, "port "+strconv.Itoa(int(port))+" listened")
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func waitLog(ctx context.Context, p *proc, off int64, match func(string) bool) (string, int64, error) {
	m := &lineMatcher{match: match}
	for {
		chunks, next, closed, wake := p.log.since(off)
		for _, c := range chunks {
			if line, at, ok := m.feed(c); ok {
				return line, at, nil
			}
		}
		off = next
		if closed {
			if line, at, ok := m.flush(); ok {
				return line, at, nil
			}
			return "", 0, exitedBefore(p, "a line matched")
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return "", 0, ctx.Err()
		}
	}
}

func exitedBefore(p *proc, what string) error {
	in := p.info()
	return wire.Errorf(wire.Conflict, "process %s exited before %s", p.id, what).
		WithDetails(map[string]any{"exitCode": *in.ExitCode})
}
