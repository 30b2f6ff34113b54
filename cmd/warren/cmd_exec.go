package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
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

// execUsage is warren exec -h's text before the flags.
const execUsage = `usage: warren exec [flags] -- CMD [ARGS...]

Runs a command in your sandbox, streaming its output, and exits with its exit code. With one argument the
sandbox runs it with sh -c, so warren exec -- 'echo hi > f && cat f' works; with several, CMD is executed
directly with ARGS.

With -t the command (by default an interactive shell) runs on a terminal in the sandbox, connected to
this one in raw mode: every key goes to it (Ctrl-C interrupts the remote program), the window size
follows, and warren exits with its exit code. Ctrl-] detaches and leaves it running; -attach ID
re-attaches and replays its recent output.

flags:
`

// execFlags are warren exec's flags.
type execFlags struct {
	cf             *clientFlags
	cwd, attach    string
	timeout        time.Duration
	env            envVars
	withStdin, tty bool
}

func (f *execFlags) register(fs *flag.FlagSet) {
	f.cf = newClientFlags()
	f.cf.register(fs)
	fs.StringVar(&f.cwd, "cwd", "", "working directory, relative to the workspace root")
	fs.DurationVar(&f.timeout, "timeout", 0, "stop the command after this long (0: the sandbox's default)")
	f.env = envVars{}
	fs.Var(f.env, "env", "set an environment variable `K=V` (repeatable)")
	fs.BoolVar(&f.withStdin, "stdin", false, "send this process's standard input to the command")
	fs.BoolVar(&f.tty, "t", false, "run the command (default: an interactive shell) on a terminal and connect this one to it: raw mode, Ctrl-C goes to the sandbox, Ctrl-] detaches")
	fs.StringVar(&f.attach, "attach", "", "with -t: re-attach to the terminal with this `id` (it replays its recent output)")
}

func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f execFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(execUsage, ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if f.tty || f.attach != "" {
		return f.terminal(ctx, argv, stdout, stderr)
	}
	if len(argv) == 0 {
		fs.Usage()
		return errors.New("no command given: warren exec -- CMD [ARGS...]")
	}
	req, err := f.request(argv)
	if err != nil {
		return err
	}
	c, err := f.cf.client()
	if err != nil {
		return err
	}
	res, err := streamExec(ctx, c, req, stdout, stderr)
	if err != nil {
		return err
	}
	if code := f.exitCode(res, stderr); code != 0 {
		return exitError{code}
	}
	return nil
}

// terminal runs argv (or a shell) on a terminal in the sandbox, or re-attaches to one (-attach).
func (f *execFlags) terminal(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	if f.withStdin || f.timeout != 0 {
		return errors.New("-stdin and -timeout do not apply to -t")
	}
	c, err := f.cf.client()
	if err != nil {
		return err
	}
	req := warren.TerminalRequest{Cwd: f.cwd}
	if len(argv) > 0 {
		req.Command, req.Args = argv[0], argv[1:]
	}
	if len(f.env) > 0 {
		req.Env = f.env
	}
	return execTerminal(ctx, c, f.attach, req, stdout, stderr)
}

// request is the exec request of argv and the flags; -stdin reads all of standard input into it.
func (f *execFlags) request(argv []string) (warren.ExecRequest, error) {
	req := warren.ExecRequest{Command: argv[0], Args: argv[1:], Cwd: f.cwd}
	if len(f.env) > 0 {
		req.Env = f.env
	}
	if f.timeout < 0 {
		return req, errors.New("-timeout must not be negative")
	}
	if f.timeout > 0 {
		req.TimeoutMs = max(1, f.timeout.Milliseconds())
	}
	if f.withStdin {
		b, err := io.ReadAll(clientStdin)
		if err != nil {
			return req, fmt.Errorf("read standard input: %w", err)
		}
		req.Stdin = string(b)
	}
	return req, nil
}

// streamExec runs req, copying its output to stdout and stderr as it comes, and returns how it ended.
func streamExec(ctx context.Context, c *warren.Client, req warren.ExecRequest, stdout, stderr io.Writer) (*warren.ExecResult, error) {
	var res *warren.ExecResult
	for ev, err := range c.Sandbox().ExecStream(ctx, req) {
		if err != nil {
			return nil, clientError{err}
		}
		switch ev.Kind {
		case warren.ExecStdout:
			if _, err := io.WriteString(stdout, ev.Data); err != nil {
				return nil, fmt.Errorf("write standard output: %w", err)
			}
		case warren.ExecStderr:
			if _, err := io.WriteString(stderr, ev.Data); err != nil {
				return nil, fmt.Errorf("write standard error: %w", err)
			}
		case warren.ExecExit:
			res = ev.Result
		}
	}
	if res == nil { // the stream always ends in exit or an error; this is defence only
		return nil, errors.New("the sandbox did not report how the command ended")
	}
	return res, nil
}

// exitCode is warren exec's exit code for res (124 for a timeout, as timeout(1)), saying on stderr what
// was truncated or timed out.
func (f *execFlags) exitCode(res *warren.ExecResult, stderr io.Writer) int {
	if res.Truncated {
		fmt.Fprintln(stderr, "warren exec: output was truncated (the sandbox caps captured output)")
	}
	code := res.ExitCode
	if res.TimedOut {
		d := "the sandbox's limit"
		if f.timeout > 0 {
			d = f.timeout.String()
		}
		fmt.Fprintf(stderr, "warren exec: the command timed out after %s (raise -timeout)\n", d)
		if code <= 0 {
			code = 124 // as timeout(1)
		}
	}
	if code < 0 || code > 255 {
		code = 1
	}
	return code
}
