package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/runner"
)

// runnerKeyEnv carries the runner's bearer key from the scheduler's driver. It is removed from the
// process environment as soon as it is read so no child process can inherit it.
const runnerKeyEnv = "WARREN_RUNNER_KEY"

func init() {
	register("runner", "run one user's sandbox (started by the scheduler)", runRunner)
}

// readyLine is the one JSON line printed on stdout once the runner listens; the driver reads it.
type readyLine struct {
	Event string `json:"event"`
	Addr  string `json:"addr"`
	PID   int    `json:"pid"`
}

func runRunner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg        runner.Config
		logLevel   slog.Level
		watchStdin bool
	)
	fs.StringVar(&cfg.Issuer, "issuer", "", "issuer (project) id of the sandbox's user (required)")
	fs.StringVar(&cfg.User, "user", "", "end-user id (required)")
	fs.Int64Var(&cfg.Epoch, "epoch", 0, "placement epoch (fencing token)")
	fs.StringVar(&cfg.Region, "region", "", "region reported to agent clients")
	fs.StringVar(&cfg.Listen, "listen", runner.DefaultListen, "address of the internal API (keep it on loopback)")
	fs.StringVar(&cfg.Workspace, "workspace", "", "the user's workspace directory, created 0700 if missing (required)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "runner-private directory, never visible in the sandbox")
	fs.BoolVar(&cfg.Insecure, "insecure-no-sandbox", false, "run commands WITHOUT bubblewrap (development only)")
	fs.StringVar(&cfg.BwrapPath, "bwrap", "", "bubblewrap binary (default: bwrap in PATH)")
	fs.DurationVar(&cfg.DefaultExecTimeout, "exec-timeout", runner.DefaultExecTimeout, "timeout of a command that names none")
	fs.DurationVar(&cfg.MaxExecTimeout, "max-exec-timeout", runner.DefaultMaxExecTimeout, "largest timeout a command may ask for")
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.BoolVar(&watchStdin, "watch-stdin", false, "shut down when stdin reaches EOF (the parent holds the pipe)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: warren runner [flags]\n\nThe bearer key is read from $%s (required).\n\nflags:\n", runnerKeyEnv)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	cfg.Key = os.Getenv(runnerKeyEnv)
	if err := os.Unsetenv(runnerKeyEnv); err != nil {
		return fmt.Errorf("unset %s: %w", runnerKeyEnv, err)
	}
	if cfg.Key == "" {
		return fmt.Errorf("%s is not set: the runner needs its bearer key", runnerKeyEnv)
	}
	// Unsetenv only edits Go's copy: the kernel still shows the original environment, key included, in
	// /proc/<pid>/environ. Non-dumpable makes that file (and ptrace) unavailable to other processes of
	// this uid, such as commands run with -insecure-no-sandbox. Sandboxed commands cannot see this
	// process at all (own PID namespace).
	dumpErr := setNonDumpable()

	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: logLevel})).With(
		"role", "runner", "issuer", cfg.Issuer, "user", cfg.User, "epoch", cfg.Epoch)
	if dumpErr != nil {
		cfg.Logger.Warn("could not make the runner non-dumpable; its environment stays readable by this uid", "err", dumpErr)
	}
	r, err := runner.New(cfg)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if watchStdin {
		// This goroutine is not waited for: a blocking read of stdin cannot be interrupted, and it ends
		// with the process.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cfg.Logger.Info("stdin closed; shutting down")
			cancel()
		}()
	}

	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-errc:
		if err == nil {
			err = errors.New("runner stopped before listening")
		}
		return err
	}
	if err := json.NewEncoder(stdout).Encode(readyLine{Event: "ready", Addr: r.Addr(), PID: os.Getpid()}); err != nil {
		cancel()
		<-errc
		return fmt.Errorf("write ready line: %w", err)
	}
	start := time.Now()
	err = <-errc
	cfg.Logger.Info("runner exited", "uptime_s", int64(time.Since(start).Seconds()), "err", err)
	return err
}

func setNonDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}
