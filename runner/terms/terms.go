// Package terms is the sandbox's terminals (docs/PROTOCOL.md#terminals): an interactive program on a
// pseudo-terminal, started through its Host (isolate.Sandbox.StartTerminal, the boundary of exec), attached
// over WebSockets. Like a background process it belongs to the runner, not to the request that created it:
// it survives its clients' disconnects, keeps the last ReplayBytes of its output for the next client to
// attach, and ends with the sandbox (Close).
package terms

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/live"
	"github.com/warren-mesh/warren/runner/isolate"
)

// Bounds of terminals.
const (
	// Max bounds the terminals running at once in a sandbox unless the quota says otherwise (the host's
	// Limit); as many exited ones are kept (the oldest is dropped to make room).
	Max = 8
	// ReplayBytes is the output a terminal keeps for replay when a client attaches.
	ReplayBytes = 64 << 10
	// MaxAttached bounds the clients attached to one terminal at once.
	MaxAttached = 4
)

// Host is what the terminals use of the runner. Its methods may be called concurrently.
type Host interface {
	// Start starts a program on a pseudo-terminal of cols×rows in the sandbox
	// (isolate.Sandbox.StartTerminal); ctx's end kills it.
	Start(ctx context.Context, spec isolate.ProcessSpec, cols, rows int) (*isolate.Terminal, error)
	// Admit refuses (resource_exhausted) to start a program while the workspace is over its limit and grew.
	Admit() error
	// WatchDisk cancels a program (with live.ErrWorkspaceFull) once it grows the workspace past its
	// limit; it returns when ctx ends.
	WatchDisk(ctx context.Context, cancel context.CancelCauseFunc)
	// Limit is the running terminals the sandbox may have now.
	Limit() int
	// KeepAwake reports whether running programs keep the sandbox awake at now.
	KeepAwake(running int, now time.Time) bool
}

// Config is what the table is built with.
type Config struct {
	Host    Host
	Logger  *slog.Logger
	Now     func() time.Time
	Metrics prometheus.Registerer
}

// defaultShell is what a terminal runs when the request names no command.
const defaultShell = `if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i`

// Table holds the sandbox's terminals. Create it with New.
type Table struct {
	cfg   Config
	host  Host
	log   *slog.Logger
	terms *live.Table[*term]
}

// term is one terminal.
type term struct {
	id      string
	command string
	args    []string
	cwd     string
	started time.Time
	t       *isolate.Terminal
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed once exited and its output read

	inMu sync.Mutex // one write of input at a time

	mu       sync.Mutex
	out      ring
	changed  chan struct{} // closed and replaced when output arrives or the terminal ends
	cols     int
	rows     int
	attached int
	ended    time.Time
	exitCode int
	why      string
}

func (tm *term) ID() string            { return tm.id }
func (tm *term) Done() <-chan struct{} { return tm.done }
func (tm *term) Stop(cause error)      { tm.cancel(cause) }

// New makes the table and registers its metrics in cfg.Metrics.
func New(cfg Config) *Table {
	return &Table{cfg: cfg, host: cfg.Host, log: cfg.Logger, terms: live.NewTable[*term]("terminal", cfg.Metrics,
		prometheus.CounterOpts{
			Name: "warren_runner_terminal_starts_total",
			Help: "Terminals created, by outcome (ok, refused, error).",
		}, prometheus.GaugeOpts{
			Name: "warren_runner_terminals_running",
			Help: "Terminals running now.",
		})}
}

// Running counts the terminals that have not exited.
func (t *Table) Running() int { return t.terms.Running() }

// start validates req (already bounded by wire.DecodeTermCreate) and starts it in dir. ctx is the runner's
// lifetime: the terminal dies when it ends.
func (t *Table) start(ctx context.Context, dir string, req wire.TermCreateRequest) (*term, error) {
	// No disk check: a terminal may start in a full workspace (to clean it); its watch kills it if it writes.
	env := map[string]string{"TERM": "xterm-256color"}
	for k, v := range req.Env {
		env[k] = v
	}
	command := req.Command
	if command == "" {
		command = defaultShell
	}
	if err := t.host.Admit(); err != nil {
		return nil, err
	}
	var tctx context.Context
	tm, err := t.terms.Add(t.host.Limit(), func(limit int) error {
		return wire.Errorf(wire.ResourceExhausted, "%d terminals are already running in this sandbox (the quota's max_terminals)", limit).
			WithDetails(map[string]any{"limit": limit, "quota": "max_terminals"})
	}, func(func(string) bool) (*term, error) {
		ctx, cancel := context.WithCancelCause(ctx)
		it, err := t.host.Start(ctx, isolate.ProcessSpec{Command: command, Args: req.Args, Dir: dir, Env: env}, req.Cols, req.Rows)
		if err != nil {
			cancel(nil)
			if wire.CodeOf(err) == wire.Internal {
				err = fmt.Errorf("start terminal: %w", err)
			}
			return nil, err
		}
		tctx = ctx
		var b [8]byte
		_, _ = rand.Read(b[:])
		return &term{
			id: hex.EncodeToString(b[:]), command: req.Command, args: req.Args, cwd: dir, started: t.cfg.Now(),
			t: it, cancel: cancel, done: make(chan struct{}), out: ring{buf: make([]byte, ReplayBytes)},
			changed: make(chan struct{}), cols: req.Cols, rows: req.Rows,
		}, nil
	})
	if err != nil {
		return nil, err
	}
	go t.host.WatchDisk(tctx, tm.cancel)
	go tm.supervise(tctx, t)
	t.log.Info("terminal started", "terminal", tm.id)
	return tm, nil
}

// supervise copies the output into the replay buffer, kills the tree when ctx ends and records the exit.
func (tm *term) supervise(ctx context.Context, t *Table) {
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 32<<10)
		for {
			n, err := tm.t.ReadOutput(buf)
			if n > 0 {
				tm.mu.Lock()
				tm.out.write(buf[:n])
				tm.notifyLocked()
				tm.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = tm.t.Kill() })
	code, _ := tm.t.Wait(context.Background())
	stop()
	select {
	case <-read:
	case <-time.After(live.DrainWait): // a descendant that escaped in insecure mode may hold the terminal
	}
	_ = tm.t.Close() // closes the master: a read still blocked returns
	<-read
	tm.mu.Lock()
	tm.ended, tm.exitCode = t.cfg.Now(), code
	if tm.why == "" && ctx.Err() != nil {
		tm.why = live.EndedBy(ctx)
	}
	close(tm.done)
	tm.notifyLocked()
	tm.mu.Unlock()
	tm.cancel(nil)
	t.log.Info("terminal exited", "terminal", tm.id, "exit_code", code, "ended", tm.why)
}

// notifyLocked wakes the attached clients; tm.mu is held.
func (tm *term) notifyLocked() {
	close(tm.changed)
	tm.changed = make(chan struct{})
}

// Exited reports whether the terminal has exited and its output was read.
func (tm *term) Exited() bool {
	select {
	case <-tm.done:
		return true
	default:
		return false
	}
}

// info describes the terminal now.
func (tm *term) info() wire.TermInfo {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	in := wire.TermInfo{
		ID: tm.id, Command: tm.command, Args: tm.args, Cwd: tm.cwd, Status: wire.ProcRunning,
		StartedAt: tm.started.UTC().Format(time.RFC3339Nano), Cols: tm.cols, Rows: tm.rows,
		Attached: tm.attached, Output: tm.out.total,
	}
	if in.Cwd == "" {
		in.Cwd = "."
	}
	if tm.Exited() {
		code := tm.exitCode
		in.Status, in.ExitCode, in.Ended = wire.ProcExited, &code, tm.why
		in.EndedAt = tm.ended.UTC().Format(time.RFC3339Nano)
	}
	return in
}

// resize sets the terminal's size (the program gets SIGWINCH).
func (tm *term) resize(cols, rows int) error {
	if err := wire.CheckTermSize(cols, rows); err != nil {
		return err
	}
	if tm.Exited() {
		return wire.Errorf(wire.Conflict, "terminal %s has exited", tm.id)
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if err := tm.t.Resize(cols, rows); err != nil {
		return fmt.Errorf("terminal %s: %w", tm.id, err)
	}
	tm.cols, tm.rows = cols, rows
	return nil
}

// input writes keyboard input. A write the program does not read (its input queue is full) blocks until
// ctx ends.
func (tm *term) input(ctx context.Context, b []byte) error {
	tm.inMu.Lock()
	defer tm.inMu.Unlock()
	if tm.Exited() {
		return wire.Errorf(wire.Conflict, "terminal %s has exited", tm.id)
	}
	stop := context.AfterFunc(ctx, func() { _ = tm.t.PTY.SetWriteDeadline(time.Now()) })
	_, err := tm.t.PTY.Write(b)
	stop()
	_ = tm.t.PTY.SetWriteDeadline(time.Time{})
	switch {
	case err != nil && ctx.Err() != nil:
		return wire.Wrap(wire.Unavailable, err, "the connection ended before the terminal read its input")
	case err != nil:
		return wire.Wrap(wire.Conflict, err, "the terminal no longer reads input")
	}
	return nil
}

// attach counts a client in, refusing past MaxAttached; the returned func counts it out.
func (tm *term) attach() (func(), error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.attached >= MaxAttached {
		return nil, wire.Errorf(wire.ResourceExhausted, "%d clients are already attached to terminal %s", MaxAttached, tm.id).
			WithDetails(map[string]any{"limit": MaxAttached})
	}
	tm.attached++
	return sync.OnceFunc(func() {
		tm.mu.Lock()
		tm.attached--
		tm.mu.Unlock()
	}), nil
}

// outputFrom returns the output kept from offset (or from the oldest byte kept, when offset is older), at
// most limit bytes, the offset after it, whether the terminal has exited (with its code) and a channel closed
// when there is more.
func (tm *term) outputFrom(offset int64, limit int) (data []byte, next int64, exited bool, code int, more <-chan struct{}) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	data, next = tm.out.from(offset, limit)
	select {
	case <-tm.done:
		exited, code = true, tm.exitCode
	default:
	}
	return data, next, exited, code, tm.changed
}

// kill ends the terminal's program (SIGKILL to its whole tree).
func (tm *term) kill() {
	tm.mu.Lock()
	if tm.why == "" && !tm.Exited() {
		tm.why = live.EndedKilled
	}
	tm.mu.Unlock()
	tm.cancel(errTermKilled)
}

var errTermKilled = errors.New("terminal killed")

// list describes every terminal, oldest first.
func (t *Table) list() []wire.TermInfo {
	terms := t.terms.Items()
	out := make([]wire.TermInfo, 0, len(terms))
	for _, tm := range terms {
		out = append(out, tm.info())
	}
	return out
}

// remove kills a terminal if it runs, waits (until ctx ends) for it to end, and forgets it.
func (t *Table) remove(ctx context.Context, id string) error {
	tm, err := t.terms.Get(id)
	if err != nil {
		return err
	}
	tm.kill()
	select {
	case <-tm.done:
	case <-ctx.Done():
		return wire.Wrap(wire.Unavailable, context.Cause(ctx), "the request ended before the terminal did")
	}
	t.terms.Forget(tm)
	return nil
}

// Close refuses new terminals and kills every running one, waiting (until ctx ends) for them to end.
func (t *Table) Close(ctx context.Context) error { return t.terms.Close(ctx, "terminals") }

// Busy reports whether running terminals keep the sandbox awake at now (the host's KeepAwake).
func (t *Table) Busy(now time.Time) bool { return t.host.KeepAwake(t.Running(), now) }

// ring keeps the last len(buf) bytes written; total counts every byte ever written.
type ring struct {
	buf   []byte
	total int64
}

func (r *ring) write(b []byte) {
	n := int64(len(r.buf))
	if int64(len(b)) > n {
		r.total += int64(len(b)) - n
		b = b[int64(len(b))-n:]
	}
	at := int(r.total % n)
	c := copy(r.buf[at:], b)
	copy(r.buf, b[c:])
	r.total += int64(len(b))
}

// from returns at most limit bytes from offset (moved up to the oldest byte kept) and the offset after them.
func (r *ring) from(offset int64, limit int) ([]byte, int64) {
	n := int64(len(r.buf))
	offset = min(r.total, offset)
	offset = max(offset, r.total-n, 0)
	size := min(r.total-offset, int64(limit))
	out := make([]byte, size)
	at := int(offset % n)
	c := copy(out, r.buf[at:])
	copy(out[c:], r.buf)
	return out, offset + size
}
