package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/isolate"
)

// Background processes (docs/PROTOCOL.md#processes). A process is started with isolate.Sandbox.Start, the
// same launching code and boundary as exec; it belongs to the runner, not to the request that started it,
// so it outlives the client, and it ends with the sandbox (shutdown kills every process tree). The table
// keeps at most MaxProcesses running processes and as many exited ones (the oldest exited record is dropped
// to make room), each with a log of at most ProcessLogBytes.

// Why the runner ended a process (wire.ProcInfo.Ended).
const (
	endedKilled        = "killed"
	endedSandbox       = "sandbox_stopped"
	endedWorkspaceFull = "workspace_full"
)

// drainWait bounds how long a process's output is read after it exited (a descendant that escaped its
// group in insecure mode may hold the pipes).
const drainWait = 2 * time.Second

// procTable holds the sandbox's background processes.
type procTable struct {
	r  *Runner
	mu sync.Mutex
	// procs in start order.
	procs  []*proc
	closed bool

	// Slots of the requests that stay open following a process (logs streams and waits), of the waits for
	// a port among them, which poll the sandbox's socket tables (whose size the tenant controls), and of the
	// waits for a regular expression, which match every line of output with it (up to MaxProcRegexCost
	// steps a byte) in the runner.
	followers, portWaits, regexWaits chan struct{}

	starts *prometheus.CounterVec
	kept   procKeep // the table kept across a sleep (procpersist.go)
}

// Bounds of the requests following processes at once in one sandbox (beyond them: resource_exhausted).
const (
	procMaxFollowers  = 64
	procMaxPortWaits  = 4
	procMaxRegexWaits = 4
)

// follow takes a slot of sem (followers or portWaits) for a request that stays open, or refuses it.
func (t *procTable) follow(sem chan struct{}, what string) (release func(), err error) {
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

func newProcTable(r *Runner) *procTable {
	t := &procTable{r: r, followers: make(chan struct{}, procMaxFollowers), portWaits: make(chan struct{}, procMaxPortWaits),
		regexWaits: make(chan struct{}, procMaxRegexWaits), starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_process_starts_total",
			Help: "Background processes started, by outcome (ok, refused, error).",
		}, []string{"outcome"})}
	r.metrics.reg.MustRegister(t.starts, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warren_runner_processes_running",
		Help: "Background processes running now.",
	}, func() float64 { return float64(t.running()) }))
	followers := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "warren_runner_process_followers",
		Help: "Requests following background processes now (all: logs streams and waits; port: waits for a port; regex: waits for a regular expression).",
	}, []string{"kind"})
	r.metrics.reg.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		followers.WithLabelValues("all").Set(float64(len(t.followers)))
		followers.WithLabelValues("port").Set(float64(len(t.portWaits)))
		followers.WithLabelValues("regex").Set(float64(len(t.regexWaits)))
		followers.Collect(ch)
	}))
	return t
}

// running counts the processes that have not exited.
func (t *procTable) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, _ := census(t.procs)
	return n
}

// counted records the outcome of a start request in warren_runner_process_starts_total.
func (t *procTable) counted(err error) error { return countStart(t.starts, err) }

// start validates req and starts it. ctx is the runner's lifetime: the process dies when it ends.
func (t *procTable) start(ctx context.Context, dir string, req wire.ProcStartRequest) (*proc, error) {
	// A process may start in a full workspace (to clean it); its watch kills it if it writes.
	if err := t.r.disk.admit(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, wire.Errorf(wire.Unavailable, "the sandbox is stopping")
	}
	limit := t.r.backgroundProcessLimit()
	running, oldestExited := census(t.procs)
	if running >= limit {
		return nil, wire.Errorf(wire.ResourceExhausted, "%d background processes are already running in this sandbox (the quota's max_background_processes, else the runner's -max-processes)", limit).
			WithDetails(map[string]any{"limit": limit, "quota": "max_background_processes"})
	}
	pctx, cancel := context.WithCancelCause(ctx)
	ip, err := t.r.sandbox.Start(pctx, isolate.ProcessSpec{Command: req.Command, Args: req.Args, Dir: dir, Env: req.Env})
	if err != nil {
		cancel(nil)
		if wire.CodeOf(err) == wire.Internal {
			err = fmt.Errorf("start process: %w", err)
		}
		return nil, err
	}
	p := &proc{
		id: t.newID(), command: req.Command, args: req.Args, cwd: dir, started: t.r.cfg.Now(),
		p: ip, log: newProcLog(t.r.processLogLimit()), cancel: cancel, done: make(chan struct{}),
		stdin: make(chan struct{}, 1),
	}
	p.stdin <- struct{}{}
	if len(t.procs) >= 2*limit && oldestExited >= 0 {
		t.procs = append(t.procs[:oldestExited], t.procs[oldestExited+1:]...)
	}
	t.procs = append(t.procs, p)
	go t.r.disk.watch(pctx, cancel)
	go p.supervise(pctx, t.r)
	t.r.log.Info("process started", "process", p.id)
	return p, nil
}

// supervise copies the output into the log, kills the tree when ctx ends, and records the exit.
func (p *proc) supervise(ctx context.Context, r *Runner) {
	var readers sync.WaitGroup
	for stream, f := range map[string]*os.File{wire.EventStdout: p.p.Stdout, wire.EventStderr: p.p.Stderr} {
		readers.Go(func() {
			var u utf8Stream
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					p.log.write(stream, u.next(buf[:n]))
				}
				if err != nil {
					p.log.write(stream, u.flush())
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
	case <-time.After(drainWait):
	}
	_ = p.p.Close() // closes our ends: a reader still blocked returns
	<-drained
	p.mu.Lock()
	p.ended, p.exitCode = r.cfg.Now(), code
	if p.why == "" && ctx.Err() != nil {
		p.why = endedSandbox
		if errors.Is(context.Cause(ctx), ErrWorkspaceFull) {
			p.why = endedWorkspaceFull
		}
	}
	p.mu.Unlock()
	p.cancel(nil)
	close(p.done)
	// Closed after done, so that whoever sees the end of the output sees the exit status too.
	p.log.close()
	r.log.Info("process exited", "process", p.id, "exit_code", code, "ended", p.why)
}

func (p *proc) exited() bool {
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
	if p.exited() {
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
		return nil // kept from before a sleep (procpersist.go): exited, as signalling an exited process
	}
	if sig == syscall.SIGKILL {
		p.mu.Lock()
		if p.why == "" && !p.exited() {
			p.why = endedKilled
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
	if p.exited() {
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

// newID is a fresh process id, unlike any in the table (kept processes included). Called with t.mu held.
func (t *procTable) newID() string {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		if !slices.ContainsFunc(t.procs, func(p *proc) bool { return p.id == id }) {
			return id
		}
	}
}

// get finds a process by id.
func (t *procTable) get(id string) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.procs {
		if p.id == id {
			return p, nil
		}
	}
	return nil, wire.Errorf(wire.NotFound, "no process %q in this sandbox", truncateID(id))
}

// list describes every process, oldest first.
func (t *procTable) list() []wire.ProcInfo {
	t.mu.Lock()
	procs := append([]*proc(nil), t.procs...)
	t.mu.Unlock()
	out := make([]wire.ProcInfo, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.info())
	}
	return out
}

// remove forgets an exited process; a running one is a conflict.
func (t *procTable) remove(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, p := range t.procs {
		if p.id != id {
			continue
		}
		if !p.exited() {
			return wire.Errorf(wire.Conflict, "process %s is running: signal it first", id)
		}
		t.procs = append(t.procs[:i], t.procs[i+1:]...)
		return nil
	}
	return wire.Errorf(wire.NotFound, "no process %q in this sandbox", truncateID(id))
}

// close refuses new processes and kills every running one, waiting (until ctx ends) for them to exit.
func (t *procTable) close(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	procs := append([]*proc(nil), t.procs...)
	t.mu.Unlock()
	return stopAll(ctx, procs, "background processes")
}

// keepAwake reports whether running processes keep the sandbox awake now: while one runs and the last
// request is less than ProcessKeepAwake ago.
func (t *procTable) keepAwake(now time.Time) bool { return t.r.keptAwake(t.running(), now) }

func truncateID(id string) string {
	if len(id) > 64 {
		return id[:64] + "..."
	}
	return id
}
