package warren

import (
	"bytes"
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/warren-mesh/warren/internal/wire"
)

// Background processes (docs/PROTOCOL.md#processes).
type (
	ProcStartRequest = wire.ProcStartRequest
	ProcInfo         = wire.ProcInfo
	ProcChunk        = wire.ProcChunk
	ProcLogs         = wire.ProcLogs
	ProcWaitRequest  = wire.ProcWaitRequest
	ProcWaitResult   = wire.ProcWaitResult
)

// Process states and what a wait waits for.
const (
	ProcRunning = wire.ProcRunning
	ProcExited  = wire.ProcExited
	WaitExit    = wire.WaitExit
	WaitPort    = wire.WaitPort
	WaitLog     = wire.WaitLog
)

func procPath(id string, action string) string {
	p := "/v1/sandbox/procs/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// StartProcess starts a background process: it runs on after the call returns and after the client
// disconnects, until it exits, is signalled, or the sandbox stops.
func (s *Sandbox) StartProcess(ctx context.Context, req ProcStartRequest) (*ProcInfo, error) {
	var in ProcInfo
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandbox/procs", nil, req, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// Processes lists the sandbox's background processes, running and exited, oldest first.
func (s *Sandbox) Processes(ctx context.Context) ([]ProcInfo, error) {
	var l wire.ProcList
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/procs", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Procs, nil
}

// Process describes one background process.
func (s *Sandbox) Process(ctx context.Context, id string) (*ProcInfo, error) {
	var in ProcInfo
	if err := s.c.doJSON(ctx, http.MethodGet, procPath(id, ""), nil, nil, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// RemoveProcess forgets an exited process (a running one is CodeConflict).
func (s *Sandbox) RemoveProcess(ctx context.Context, id string) error {
	return s.c.doJSON(ctx, http.MethodDelete, procPath(id, ""), nil, nil, nil)
}

// SignalProcess sends a signal by name ("TERM", "SIGINT", "KILL", ...; wire.ProcSignals lists them).
func (s *Sandbox) SignalProcess(ctx context.Context, id, signal string) (*ProcInfo, error) {
	var in ProcInfo
	if err := s.c.doJSON(ctx, http.MethodPost, procPath(id, "signal"), nil, wire.ProcSignalRequest{Signal: signal}, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// WriteStdin writes data (at most 1 MiB a call) to the process's standard input and, with closeAfter,
// then closes it. It returns once the process has taken the data into its pipe.
func (s *Sandbox) WriteStdin(ctx context.Context, id string, data []byte, closeAfter bool) error {
	var q url.Values
	if closeAfter {
		q = url.Values{"close": {"true"}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.c.endpoint(procPath(id, "stdin"), q), bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.c.do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// WaitProcess waits on the server for what req says (exit, a port listening in the sandbox, or a log
// line), up to req.TimeoutMs (CodeTimeout after it). A process that exits first is CodeConflict.
func (s *Sandbox) WaitProcess(ctx context.Context, id string, req ProcWaitRequest) (*ProcWaitResult, error) {
	var res ProcWaitResult
	if err := s.c.doJSON(ctx, http.MethodPost, procPath(id, "wait"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ProcessLogs returns the output kept from offset (from the oldest kept byte when offset is older).
func (s *Sandbox) ProcessLogs(ctx context.Context, id string, offset int64) (*ProcLogs, error) {
	var l ProcLogs
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if err := s.c.doJSON(ctx, http.MethodGet, procPath(id, "logs"), q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// ProcLogEvent is one event of FollowProcessLogs: a chunk of output (Chunk), or the process's end (Exit,
// the last event).
type ProcLogEvent struct {
	Chunk *ProcChunk
	Exit  *ProcInfo
}

// FollowProcessLogs streams the output from offset as it is produced, then one event with Exit once the
// process has exited and its output is complete. A failure is yielded once as the last element. Stopping
// the iteration closes the stream; the process runs on.
func (s *Sandbox) FollowProcessLogs(ctx context.Context, id string, offset int64) iter.Seq2[ProcLogEvent, error] {
	return func(yield func(ProcLogEvent, error) bool) {
		q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.endpoint(procPath(id, "logs"), q), nil)
		if err != nil {
			yield(ProcLogEvent{}, err)
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := s.c.do(req)
		if err != nil {
			yield(ProcLogEvent{}, err)
			return
		}
		defer resp.Body.Close()
		err = eachEvent(ctx, resp.Body, "logs stream", func(ev sseEvent) (bool, error) {
			switch ev.Event {
			case wire.EventStdout, wire.EventStderr:
				var c ProcChunk
				if err := decodeSSE(ev, &c); err != nil {
					return false, err
				}
				return yield(ProcLogEvent{Chunk: &c}, nil), nil
			case wire.EventExit:
				var in ProcInfo
				if err := decodeSSE(ev, &in); err != nil {
					return false, err
				}
				yield(ProcLogEvent{Exit: &in}, nil)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			yield(ProcLogEvent{}, err)
		}
	}
}
