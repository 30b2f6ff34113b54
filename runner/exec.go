package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/text"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/isolate"
)

// maxExecBody bounds the JSON body of POST /v1/sandbox/exec (stdin travels inside it).
const maxExecBody = 8 << 20

// execRoutes mounts command execution.
func (a *api) execRoutes(s web.Serve) {
	s.Handle("/v1/sandbox/exec", httpx.Methods{http.MethodPost: a.exec})
}

// exec serves POST /v1/sandbox/exec (docs/PROTOCOL.md#sandbox-api). The body is a wire.ExecRequest (unknown
// fields are ignored). Without args the command is a /bin/sh -c script; with args it is executed directly.
// The answer is a wire.ExecResult, or with "Accept: text/event-stream" a stream of stdout/stderr events
// (data: wire.ExecChunk) ending in one exit event (data: wire.ExecResult with empty output) or, if something
// fails after the stream started, one error event (data: wire.Error). A nonzero exit is a result, not an HTTP
// error. A timed-out command reports timedOut and exitCode -1.
func (a *api) exec(w http.ResponseWriter, req *http.Request) {
	var er wire.ExecRequest
	if err := strictjson.Read(http.MaxBytesReader(w, req.Body, maxExecBody), &er); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			web.Fail(w, req, wire.Errorf(wire.PayloadTooLarge, "exec request exceeds %d bytes", maxExecBody))
			return
		}
		web.Fail(w, req, wire.JSONError(err, "exec request"))
		return
	}
	spec, err := a.execSpec(er)
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	if strings.Contains(req.Header.Get("Accept"), "text/event-stream") {
		a.execStream(w, req, spec)
		return
	}
	stdout := &text.Capped{Max: a.r.cfg.OutputCap}
	stderr := &text.Capped{Max: a.r.cfg.OutputCap}
	spec.Stdout, spec.Stderr = stdout, stderr
	res, err := a.r.runCommand(req.Context(), spec)
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	_ = httpx.WriteJSON(w, http.StatusOK, wire.ExecResult{
		Stdout:     stdout.String(),
		Stderr:     stderr.String(),
		ExitCode:   res.ExitCode,
		DurationMs: res.Duration.Milliseconds(),
		Truncated:  stdout.Truncated() || stderr.Truncated(),
		TimedOut:   res.TimedOut,
		OOMKilled:  res.OOMKilled,
	})
}

// execSpec validates a request into a Spec without output writers. Everything that can be refused is
// refused here, before a streamed answer commits to 200.
func (a *api) execSpec(er wire.ExecRequest) (isolate.Spec, error) {
	if er.Command == "" {
		return isolate.Spec{}, wire.Errorf(wire.InvalidArgument, "command is required")
	}
	if er.TimeoutMs < 0 {
		return isolate.Spec{}, wire.Errorf(wire.InvalidArgument, "timeoutMs must not be negative")
	}
	timeout := a.r.cfg.DefaultExecTimeout
	if er.TimeoutMs > 0 {
		timeout = a.r.cfg.MaxExecTimeout
		if er.TimeoutMs < a.r.cfg.MaxExecTimeout.Milliseconds() {
			timeout = time.Duration(er.TimeoutMs) * time.Millisecond
		}
	}
	dir, err := a.root.Dir(er.Cwd)
	if err != nil {
		return isolate.Spec{}, err
	}
	var stdin io.Reader
	if er.Stdin != "" {
		stdin = strings.NewReader(er.Stdin)
	}
	spec := isolate.Spec{Command: er.Command, Args: er.Args, Dir: dir, Env: er.Env, Stdin: stdin, Timeout: timeout}
	if err := isolate.Validate(spec); err != nil {
		return isolate.Spec{}, err
	}
	return spec, nil
}

// runCommand runs spec, counting it and recording the outcome. An error from a cancelled context becomes
// unavailable.
func (r *Runner) runCommand(ctx context.Context, spec isolate.Spec) (isolate.Result, error) {
	release, err := r.takeExec()
	if err != nil {
		r.metrics.execs.WithLabelValues(outcomeError).Inc()
		return isolate.Result{ExitCode: -1}, err
	}
	defer release()
	if err := r.disk.admit(); err != nil {
		r.metrics.execs.WithLabelValues(outcomeError).Inc()
		return isolate.Result{ExitCode: -1}, err
	}
	ctx, cancelFull := context.WithCancelCause(ctx)
	defer cancelFull(nil)
	go r.disk.watch(ctx, cancelFull)
	r.running.Add(1)
	defer r.running.Add(-1)
	oom := r.sandbox.OOMKills()
	res, err := r.sandbox.Run(ctx, spec)
	if err == nil && oom >= 0 && res.ExitCode == 128+9 && r.sandbox.OOMKills() > oom {
		res.OOMKilled = true
	}
	outcome := outcomeOK
	switch {
	case err != nil && errors.Is(context.Cause(ctx), ErrWorkspaceFull):
		outcome = outcomeError
		err = wire.Wrap(wire.ResourceExhausted, err, "command killed: the workspace grew past its size limit (the quota's max_workspace_bytes)")
	case err != nil && ctx.Err() != nil:
		outcome = outcomeCanceled
		msg := "command cancelled: the request ended"
		if errors.Is(context.Cause(ctx), ErrShuttingDown) {
			msg = "command killed: runner shutting down"
		}
		err = wire.Wrap(wire.Unavailable, err, msg)
	case err != nil:
		outcome = outcomeError
		if wire.CodeOf(err) == wire.Internal {
			err = fmt.Errorf("run command: %w", err)
		}
	case res.TimedOut:
		outcome = outcomeTimeout
	case res.ExitCode != 0:
		outcome = outcomeNonzero
	}
	r.metrics.execs.WithLabelValues(outcome).Inc()
	if outcome != outcomeError {
		r.metrics.execDuration.Observe(res.Duration.Seconds())
	}
	return res, err
}

// execStream runs spec answering with server-sent events as output arrives. At most StreamOutputCap bytes
// of output (both streams together, counted after UTF-8 conversion) are forwarded; the rest is read and
// dropped, and the exit event reports truncated.
func (a *api) execStream(w http.ResponseWriter, req *http.Request, spec isolate.Spec) {
	ctx := req.Context()
	chunks := make(chan chunk, 16)
	spec.Stdout = chunkWriter{ctx: ctx, event: wire.EventStdout, ch: chunks}
	spec.Stderr = chunkWriter{ctx: ctx, event: wire.EventStderr, ch: chunks}

	events := httpx.StartEvents(w)

	type outcome struct {
		res isolate.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := a.r.runCommand(ctx, spec)
		done <- outcome{res, err}
	}()

	var (
		sent      int64
		truncated bool
		streams   = map[string]*text.Stream{wire.EventStdout: {}, wire.EventStderr: {}}
	)
	forward := func(event, data string) {
		if room := a.r.cfg.StreamOutputCap - sent; int64(len(data)) > room {
			truncated = true
			data = text.Truncate(data, int(max(room, 0)))
		}
		if data == "" {
			return
		}
		sent += int64(len(data))
		_ = events.Send(event, wire.ExecChunk{Data: data})
	}
	for {
		select {
		case c := <-chunks:
			forward(c.event, streams[c.event].Next(c.data))
		case o := <-done:
			// Run has returned, so every write has been handed over: what is left is buffered.
			for drained := false; !drained; {
				select {
				case c := <-chunks:
					forward(c.event, streams[c.event].Next(c.data))
				default:
					drained = true
				}
			}
			forward(wire.EventStdout, streams[wire.EventStdout].Flush())
			forward(wire.EventStderr, streams[wire.EventStderr].Flush())
			if o.err != nil {
				pub, logIt := wire.Public(o.err)
				if logIt {
					web.Logger(req).Error("streamed exec failed", "err", o.err)
				}
				_ = events.Send(wire.EventError, pub)
			} else {
				_ = events.Send(wire.EventExit, wire.ExecResult{
					ExitCode:   o.res.ExitCode,
					DurationMs: o.res.Duration.Milliseconds(),
					Truncated:  truncated,
					TimedOut:   o.res.TimedOut,
					OOMKilled:  o.res.OOMKilled,
				})
			}
			return
		}
	}
}
