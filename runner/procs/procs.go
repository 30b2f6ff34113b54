// Package procs is the sandbox's background processes (docs/PROTOCOL.md#processes). A process is started
// through its Host (isolate.Sandbox.Start, the same launching code and boundary as exec); it belongs to the
// runner, not to the request that started it, so it outlives the client, and it ends with the sandbox
// (Close kills every process tree). The table keeps at most the host's Limit of running processes and as
// many exited ones (the oldest exited record is dropped to make room), each with a log of at most the
// host's LogLimit; it is kept in the blob store when the sandbox stops (persist.go).
package procs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/live"
	"github.com/warren-mesh/warren/runner/internal/text"
	"github.com/warren-mesh/warren/runner/isolate"
)

// Host is what the processes use of the runner. Its methods may be called concurrently.
type Host interface {
	// Start starts a program in the sandbox (isolate.Sandbox.Start); ctx's end kills it.
	Start(ctx context.Context, spec isolate.ProcessSpec) (*isolate.Process, error)
	// Admit refuses (resource_exhausted) to start a program while the workspace is over its limit and grew.
	Admit() error
	// WatchDisk cancels a program (with live.ErrWorkspaceFull) once it grows the workspace past its
	// limit; it returns when ctx ends.
	WatchDisk(ctx context.Context, cancel context.CancelCauseFunc)
	// Limit is the running processes the sandbox may have now; LogLimit the output kept of a process
	// started now.
	Limit() int
	LogLimit() int64
	// KeepAwake reports whether running programs keep the sandbox awake at now.
	KeepAwake(running int, now time.Time) bool
}

// Config is what the table is built with.
type Config struct {
	Host    Host
	Logger  *slog.Logger
	Now     func() time.Time
	Metrics prometheus.Registerer
	// Epoch fences the kept table (persist.go); LogBytes bounds the log of a process kept from before a
	// sleep.
	Epoch    int64
	LogBytes int64
	// DefaultWait applies to a wait that gives no timeoutMs; MaxWait caps it.
	DefaultWait, MaxWait time.Duration
	// Store and Prefix say where the table is kept across a sleep (nil Store: it is not).
	Store  blob.Store
	Prefix string
}

// Table holds the sandbox's background processes. Create it with New.
type Table struct {
	cfg   Config
	host  Host
	log   *slog.Logger
	procs *live.Table[*proc]

	// Slots of the requests that stay open following a process (logs streams and waits), of the waits for
	// a port among them, which poll the sandbox's socket tables (whose size the tenant controls), and of the
	// waits for a regular expression, which match every line of output with it (up to MaxProcRegexCost
	// steps a byte) in the runner.
	followers, portWaits, regexWaits chan struct{}

	kept procKeep // the table kept across a sleep (persist.go)
}

// Bounds of the requests following processes at once in one sandbox (beyond them: resource_exhausted).
const (
	procMaxFollowers  = 64
	procMaxPortWaits  = 4
	procMaxRegexWaits = 4
)

// follow takes a slot of sem (followers or portWaits) for a request that stays open, or refuses it.
func (t *Table) follow(sem chan struct{}, what string) (release func(), err error) {
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	default:
		return nil, wire.Errorf(wire.ResourceExhausted, "%d %s are already open in this sandbox", cap(sem), what).
			WithDetails(map[string]any{"limit": cap(sem)})
	}
}

// proc is one background process.
type proc struct {
	id      string
	command string
	args    []string
	cwd     string
	started time.Time
	p       *isolate.Process
	log     *procLog
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed once exited and drained

	stdin chan struct{} // one writer at a time (a token)

	mu          sync.Mutex
	ended       time.Time
	exitCode    int
	why         string
	stdinClosed bool
}

func (p *proc) ID() string            { return p.id }
func (p *proc) Done() <-chan struct{} { return p.done }
func (p *proc) Stop(cause error)      { p.cancel(cause) }

// New makes the table and registers its metrics in cfg.Metrics.
func New(cfg Config) *Table {
	t := &Table{cfg: cfg, host: cfg.Host, log: cfg.Logger, followers: make(chan struct{}, procMaxFollowers),
		portWaits: make(chan struct{}, procMaxPortWaits), regexWaits: make(chan struct{}, procMaxRegexWaits)}
	t.procs = live.NewTable[*proc]("process", cfg.Metrics, prometheus.CounterOpts{
		Name: "warren_runner_process_starts_total",
		Help: "Background processes started, by outcome (ok, refused, error).",
	}, prometheus.GaugeOpts{
		Name: "warren_runner_processes_running",
		Help: "Background processes running now.",
	})
	followers := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "warren_runner_process_followers",
		Help: "Requests following background processes now (all: logs streams and waits; port: waits for a port; regex: waits for a regular expression).",
	}, []string{"kind"})
	cfg.Metrics.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		followers.WithLabelValues("all").Set(float64(len(t.followers)))
		followers.WithLabelValues("port").Set(float64(len(t.portWaits)))
		followers.WithLabelValues("regex").Set(float64(len(t.regexWaits)))
		followers.Collect(ch)
	}))
	t.keepIn(cfg.Store, cfg.Prefix)
	return t
}

// Running counts the processes that have not exited.
func (t *Table) Running() int { return t.procs.Running() }

// start validates req and starts it. ctx is the runner's lifetime: the process dies when it ends.
func (t *Table) start(ctx context.Context, dir string, req wire.ProcStartRequest) (*proc, error) {
	// A process may start in a full workspace (to clean it); its watch kills it if it writes.
	if err := t.host.Admit(); err != nil {
		return nil, err
	}
	var pctx context.Context
	p, err := t.procs.Add(t.host.Limit(), func(limit int) error {
		return wire.Errorf(wire.ResourceExhausted, "%d background processes are already running in this sandbox (the quota's max_background_processes, else the runner's -max-processes)", limit).
			WithDetails(map[string]any{"limit": limit, "quota": "max_background_processes"})
	}, func(taken func(string) bool) (*proc, error) {
		ctx, cancel := context.WithCancelCause(ctx)
		ip, err := t.host.Start(ctx, isolate.ProcessSpec{Command: req.Command, Args: req.Args, Dir: dir, Env: req.Env})
		if err != nil {
			cancel(nil)
			if wire.CodeOf(err) == wire.Internal {
				err = fmt.Errorf("start process: %w", err)
			}
			return nil, err
		}
		pctx = ctx
		p := &proc{
			id: newID(taken), command: req.Command, args: req.Args, cwd: dir, started: t.cfg.Now(),
			p: ip, log: newProcLog(t.host.LogLimit()), cancel: cancel, done: make(chan struct{}),
			stdin: make(chan struct{}, 1),
		}
		p.stdin <- struct{}{}
		return p, nil
	})
	if err != nil {
		return nil, err
	}
	go t.host.WatchDisk(pctx, p.cancel)
	go p.supervise(pctx, t)
	t.log.Info("process started", "process", p.id)
	return p, nil
}

// supervise copies the output into the log, kills the tree when ctx ends, and records the exit.
func (p *proc) supervise(ctx context.Context, t *Table) {
	var readers sync.WaitGroup
	for stream, f := range map[string]*os.File{wire.EventStdout: p.p.Stdout, wire.EventStderr: p.p.Stderr} {
		readers.Go(func() {
			var u text.Stream
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					p.log.write(stream, u.Next(buf[:n]))
				}
				if err != nil {
					p.log.write(stream, u.Flush())
					return
				}
			}
		})
	}
	stop := context.AfterFunc(ctx, func() { _ = p.p.Kill() })
	code, _ := p.p.Wait(context.Background())
	stop()
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(live.DrainWait):
	}
	_ = p.p.Close() // closes our ends: a reader still blocked returns
	<-drained
	p.mu.Lock()
	p.ended, p.exitCode = t.cfg.Now(), code
	if p.why == "" && ctx.Err() != nil {
		p.why = live.EndedBy(ctx)
	}
	p.mu.Unlock()
	p.cancel(nil)
	close(p.done)
	// Closed after done, so that whoever sees the end of the output sees the exit status too.
	p.log.close()
	t.log.Info("process exited", "process", p.id, "exit_code", code, "ended", p.why)
}

// Exited reports whether the process has exited and its output was read.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// info describes the process now.
func (p *proc) info() wire.ProcInfo {
	start, end := p.log.bounds()
	p.mu.Lock()
	defer p.mu.Unlock()
	in := wire.ProcInfo{
		ID: p.id, Command: p.command, Args: p.args, Cwd: p.cwd, Status: wire.ProcRunning,
		StartedAt: p.started.UTC().Format(time.RFC3339Nano), LogStart: start, LogEnd: end, StdinClosed: p.stdinClosed,
	}
	if in.Cwd == "" {
		in.Cwd = "."
	}
	if p.Exited() {
		code := p.exitCode
		in.Status, in.ExitCode, in.Ended = wire.ProcExited, &code, p.why
		in.EndedAt = p.ended.UTC().Format(time.RFC3339Nano)
	}
	return in
}

// signalNumbers maps wire.ProcSignals to Linux signals.
var signalNumbers = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT,
	"STOP": syscall.SIGSTOP, "WINCH": syscall.SIGWINCH,
}

// signal sends a signal named by wire.ParseSignal.
func (p *proc) signal(name string) error {
	sig, ok := signalNumbers[name]
	if !ok {
		return wire.Errorf(wire.InvalidArgument, "signal %s is not supported", name)
	}
	if p.p == nil {
		return nil // kept from before a sleep (persist.go): exited, as signalling an exited process
	}
	if sig == syscall.SIGKILL {
		p.mu.Lock()
		if p.why == "" && !p.Exited() {
			p.why = live.EndedKilled
		}
		p.mu.Unlock()
	}
	if err := p.p.Signal(sig); err != nil {
		return fmt.Errorf("process %s: %w", p.id, err)
	}
	return nil
}

// writeStdin writes body (at most wire.MaxProcStdinWrite bytes) to the process's stdin, then closes it
// when closeAfter. One write at a time; a write the process does not read blocks until ctx ends. The body
// is read only once this write's turn has come: writes queued behind one the process does not read hold
// no memory (a tenant could otherwise queue any number of 1 MiB bodies in the runner).
func (p *proc) writeStdin(ctx context.Context, body io.Reader, closeAfter bool) error {
	select {
	case <-p.stdin:
	case <-ctx.Done():
		return wire.Wrap(wire.Unavailable, context.Cause(ctx), "the request ended while another write to stdin was pending")
	}
	defer func() { p.stdin <- struct{}{} }()
	b, err := io.ReadAll(io.LimitReader(body, wire.MaxProcStdinWrite+1))
	if err != nil {
		return wire.Wrap(wire.InvalidArgument, err, "stdin body could not be read")
	}
	if len(b) > wire.MaxProcStdinWrite {
		return wire.Errorf(wire.PayloadTooLarge, "one write to stdin is at most %d bytes", wire.MaxProcStdinWrite)
	}
	p.mu.Lock()
	closed := p.stdinClosed
	p.mu.Unlock()
	if closed {
		return wire.Errorf(wire.Conflict, "stdin of process %s is closed", p.id)
	}
	if p.Exited() {
		return wire.Errorf(wire.Conflict, "process %s has exited", p.id)
	}
	if len(b) > 0 {
		stop := context.AfterFunc(ctx, func() { _ = p.p.Stdin.SetWriteDeadline(time.Now()) })
		_, err := p.p.Stdin.Write(b)
		stop()
		_ = p.p.Stdin.SetWriteDeadline(time.Time{})
		switch {
		case err != nil && ctx.Err() != nil:
			return wire.Wrap(wire.Unavailable, err, "the request ended before the process read its input")
		case err != nil:
			return wire.Wrap(wire.Conflict, err, "the process no longer reads its stdin")
		}
	}
	if closeAfter {
		p.mu.Lock()
		p.stdinClosed = true
		p.mu.Unlock()
		_ = p.p.Stdin.Close()
	}
	return nil
}

// newID is a fresh process id, unlike any taken in the table (kept processes included).
func newID(taken func(string) bool) string {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if id := hex.EncodeToString(b[:]); !taken(id) {
			return id
		}
	}
}

// list describes every process, oldest first.
func (t *Table) list() []wire.ProcInfo {
	procs := t.procs.Items()
	out := make([]wire.ProcInfo, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.info())
	}
	return out
}

// remove forgets an exited process; a running one is a conflict.
func (t *Table) remove(id string) error {
	return t.procs.Remove(id, func(p *proc) error {
		if !p.Exited() {
			return wire.Errorf(wire.Conflict, "process %s is running: signal it first", id)
		}
		return nil
	})
}

// Close refuses new processes and kills every running one, waiting (until ctx ends) for them to exit.
func (t *Table) Close(ctx context.Context) error { return t.procs.Close(ctx, "background processes") }

// Busy reports whether running processes keep the sandbox awake at now (the host's KeepAwake).
func (t *Table) Busy(now time.Time) bool { return t.host.KeepAwake(t.Running(), now) }
