package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("exec", "run a command in your sandbox: warren exec [-url U] [-token T] [-t] -- CMD [ARGS...]", runExec)
}

// envVars collects repeated -env K=V flags.
type envVars map[string]string

func (e envVars) String() string { return "" }

func (e envVars) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	e[k] = v
	return nil
}

func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags()
	cf.register(fs)
	cwd := fs.String("cwd", "", "working directory, relative to the workspace root")
	timeout := fs.Duration("timeout", 0, "stop the command after this long (0: the sandbox's default)")
	env := envVars{}
	fs.Var(env, "env", "set an environment variable `K=V` (repeatable)")
	withStdin := fs.Bool("stdin", false, "send this process's standard input to the command")
	tty := fs.Bool("t", false, "run the command (default: an interactive shell) on a terminal and connect this one to it: raw mode, Ctrl-C goes to the sandbox, Ctrl-] detaches")
	attach := fs.String("attach", "", "with -t: re-attach to the terminal with this `id` (it replays its recent output)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: warren exec [flags] -- CMD [ARGS...]

Runs a command in your sandbox, streaming its output, and exits with its exit code. With one argument the
sandbox runs it with sh -c, so warren exec -- 'echo hi > f && cat f' works; with several, CMD is executed
directly with ARGS.

With -t the command (by default an interactive shell) runs on a terminal in the sandbox, connected to
this one in raw mode: every key goes to it (Ctrl-C interrupts the remote program), the window size
follows, and warren exits with its exit code. Ctrl-] detaches and leaves it running; -attach ID
re-attaches and replays its recent output.

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if *tty || *attach != "" {
		if *withStdin || *timeout != 0 {
			return errors.New("-stdin and -timeout do not apply to -t")
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		req := warren.TerminalRequest{Cwd: *cwd}
		if len(argv) > 0 {
			req.Command, req.Args = argv[0], argv[1:]
		}
		if len(env) > 0 {
			req.Env = env
		}
		return execTerminal(ctx, c, *attach, req, stdout, stderr)
	}
	if len(argv) == 0 {
		fs.Usage()
		return errors.New("no command given: warren exec -- CMD [ARGS...]")
	}
	req := warren.ExecRequest{Command: argv[0], Args: argv[1:], Cwd: *cwd}
	if len(env) > 0 {
		req.Env = env
	}
	if *timeout < 0 {
		return errors.New("-timeout must not be negative")
	}
	if *timeout > 0 {
		req.TimeoutMs = max(1, timeout.Milliseconds())
	}
	if *withStdin {
		b, err := io.ReadAll(clientStdin)
		if err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
		req.Stdin = string(b)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}

	var res *warren.ExecResult
	for ev, err := range c.Sandbox().ExecStream(ctx, req) {
		if err != nil {
			return clientError{err}
		}
		switch ev.Kind {
		case warren.ExecStdout:
			if _, err := io.WriteString(stdout, ev.Data); err != nil {
				return fmt.Errorf("write standard output: %w", err)
			}
		case warren.ExecStderr:
			if _, err := io.WriteString(stderr, ev.Data); err != nil {
				return fmt.Errorf("write standard error: %w", err)
			}
		case warren.ExecExit:
			res = ev.Result
		}
	}
	if res == nil { // the stream always ends in exit or an error; this is defence only
		return errors.New("the sandbox did not report how the command ended")
	}
	if res.Truncated {
		fmt.Fprintln(stderr, "warren exec: output was truncated (the sandbox caps captured output)")
	}
	code := res.ExitCode
	if res.TimedOut {
		d := "the sandbox's limit"
		if *timeout > 0 {
			d = timeout.String()
		}
		fmt.Fprintf(stderr, "warren exec: the command timed out after %s (raise -timeout)\n", d)
		if code <= 0 {
			code = 124 // as timeout(1)
		}
	}
	if code < 0 || code > 255 {
		code = 1
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}
