package roles

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/runner"
)

// runnerKeyEnv carries the runner's bearer key from the scheduler's driver. It is removed from the
// process environment as soon as it is read so no child process can inherit it.
const runnerKeyEnv = "WARREN_RUNNER_KEY"

// modelKeyEnv carries the real model API key to the runner's model proxy; removed like the runner key.
const modelKeyEnv = "WARREN_MODEL_API_KEY"

func init() {
	register("runner", "run one user's sandbox (started by the scheduler)", runRunner)
}

// readyLine is the one JSON line printed on stdout once the runner listens; the driver reads it.
type readyLine struct {
	Event   string `json:"event"`
	Addr    string `json:"addr"`
	PID     int    `json:"pid"`
	Metrics string `json:"metrics,omitempty"`
}

func runRunner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newRunnerFlags()
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(fmt.Sprintf("usage: warren runner [flags]\n\nThe bearer key is read from $%s (required without -consul; with -consul the runner makes its own\nand publishes it in its Consul registration).\n\nflags:\n", runnerKeyEnv), ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	modelKey, err := f.readKeys()
	if err != nil {
		return err
	}
	if f.warm {
		if err := f.claimWarm(ctx, stderr); err != nil {
			return err
		}
	}
	cfg, cl, err := f.config(ctx, modelKey)
	if err != nil {
		return err
	}
	defer cl.close()
	return f.serve(ctx, cfg, stdout, stderr)
}

// claimWarm waits, as a warm-pool runner, for a scheduler's assignment and takes its user, epoch, listener
// address, region and template.
func (f *runnerFlags) claimWarm(ctx context.Context, stderr io.Writer) error {
	if f.prod.consulAddr == "" {
		return errors.New("-warm needs -consul: warm runners are found and claimed through Consul")
	}
	cfg := &f.cfg
	wlog := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: f.logLevel})).With("role", "runner", "alloc", f.alloc)
	a, addr, err := awaitAssignment(ctx, cfg.Listen, cfg.Key, f.alloc, cfg.Region, &f.prod, wlog)
	if err != nil {
		return err
	}
	cfg.Issuer, cfg.User, cfg.Epoch, cfg.Listen = a.Issuer, a.User, a.Epoch, addr
	f.snapPrefix = "" // the job's was a placeholder's: derived from the assigned user
	if a.Region != "" {
		cfg.Region = a.Region
	}
	if a.Template != "" {
		cfg.Template = a.Template
	}
	return nil
}

// serve runs the runner of cfg until ctx ends, it sleeps or it is fenced: the owner lock held first (with
// -consul), the ready line printed once it listens.
func (f *runnerFlags) serve(ctx context.Context, cfg runner.Config, stdout, stderr io.Writer) error {
	// Unsetenv only edits Go's copy: the kernel still shows the original environment, key included, in
	// /proc/<pid>/environ. Non-dumpable makes that file (and ptrace) unavailable to other processes of
	// this uid, such as commands run with -insecure-no-sandbox. Sandboxed commands cannot see this
	// process at all (own PID namespace).
	dumpErr := setNonDumpable()
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: f.logLevel})).With(
		"role", "runner", "issuer", cfg.Issuer, "user", cfg.User, "epoch", cfg.Epoch)
	if dumpErr != nil {
		cfg.Logger.Warn("could not make the runner non-dumpable; its environment stays readable by this uid", "err", dumpErr)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if f.prod.consulAddr != "" {
		release, err := f.holdLock(ctx, &cfg, cancel)
		if err != nil {
			return err
		}
		defer release()
	}
	r, err := runner.New(cfg)
	if err != nil {
		return err
	}
	metricsAddr, metricsDone, err := serveMetrics(ctx, f.metricsAt, r.Metrics(), cfg.Logger)
	if err != nil {
		return err
	}
	defer func() { cancel(nil); metricsDone() }()
	if f.watchStdin {
		// This goroutine is not waited for: a blocking read of stdin cannot be interrupted, and it ends
		// with the process.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cfg.Logger.Info("stdin closed; shutting down")
			cancel(nil)
		}()
	}
	return runUntilDone(ctx, cancel, r, metricsAddr, stdout, cfg.Logger)
}

// holdLock binds the listener and holds the user's owner lock in Consul (docs/ARCHITECTURE.md#owner-lock)
// before the runner restores or serves anything, so an older epoch still shutting down is fenced (its
// lock lost, its final snapshot skipped) before this one reads the latest snapshot. Requests that arrive
// meanwhile wait in the listen backlog. Losing the lock later (session invalidated, a newer epoch took
// over, Consul unreachable past the TTL) cancels ctx with runner.ErrFencedOff: the agent stops without a
// final snapshot and the process ends.
func (f *runnerFlags) holdLock(ctx context.Context, cfg *runner.Config, cancel context.CancelCauseFunc) (release func(), err error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	cfg.Listener, cfg.Listen = ln, ln.Addr().String()
	lost, release, err := holdOwnerLock(ctx, &f.prod, registry.Entry{
		Issuer: cfg.Issuer, User: cfg.User, Epoch: cfg.Epoch, Region: cfg.Region, Alloc: f.alloc,
		Addr: ln.Addr().String(), Key: cfg.Key, Since: time.Now(),
	}, cfg.Logger)
	if err != nil {
		ln.Close()
		return nil, err
	}
	log := cfg.Logger
	go func() {
		select {
		case <-lost:
			log.Error("owner lock lost: fencing myself (stopping the agent and exiting, no final snapshot)")
			cancel(runner.ErrFencedOff)
		case <-ctx.Done():
		}
	}()
	return release, nil
}

// runUntilDone runs r, prints the ready line once it listens, and returns how it ended: a fenced runner's
// error says so (errFenced), for a non-zero exit.
func runUntilDone(ctx context.Context, cancel context.CancelCauseFunc, r *runner.Runner, metricsAddr string, stdout io.Writer, log *slog.Logger) error {
	fenced := func(err error) error {
		if errors.Is(context.Cause(ctx), runner.ErrFencedOff) {
			return errors.Join(err, errFenced)
		}
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-errc:
		if err == nil {
			err = errors.New("runner stopped before listening")
		}
		return fenced(err)
	}
	if err := json.NewEncoder(stdout).Encode(readyLine{Event: "ready", Addr: r.Addr(), PID: os.Getpid(), Metrics: metricsAddr}); err != nil {
		cancel(nil)
		<-errc
		return fmt.Errorf("write ready line: %w", err)
	}
	start := time.Now()
	err := fenced(<-errc)
	log.Info("runner exited", "uptime_s", int64(time.Since(start).Seconds()), "err", err)
	return err
}

func setNonDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}
