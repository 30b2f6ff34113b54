package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("proc", "background processes in your sandbox: warren proc start|ls|get|logs|wait|signal|kill|stdin|rm", runProc)
	register("sessions", "your conversations: warren sessions [ls|rm ID]", runSessions)
}

const procUsage = `usage: warren proc [-url U] [-token T] COMMAND ...

commands:
  start [-cwd DIR] [-env K=V]... COMMAND [ARG...]
                        start a background process (one COMMAND runs under sh -c; with ARGs, directly);
                        prints its id
  ls [-json]            list the processes, running and exited
  get ID                describe one process (JSON)
  logs [-f] [-offset N] ID
                        print its output from byte N; -f follows it until the process exits
  wait [-port P | -log PATTERN [-regex]] [-timeout D] ID
                        wait until it exits, until port P listens in the sandbox, or a line of its
                        output contains PATTERN
  signal ID SIGNAL      send a signal (TERM, INT, HUP, QUIT, KILL, USR1, USR2, STOP, CONT, WINCH)
  kill ID               send KILL: the process and everything it started end
  stdin [-close] ID     copy standard input to the process's stdin (-close closes it after)
  rm ID                 forget an exited process

Processes outlive this command and the connection; they end with the sandbox.
`

func runProc(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runSubcommands(ctx, "proc", procUsage, args, stdout, stderr, map[string]subcommand{
		"start": procStart, "ls": procList, "get": procGet, "logs": procLogs, "wait": procWait,
		"signal": procSignal, "kill": procKill, "stdin": procStdin, "rm": procRemove,
	})
}

// subcommand is one command of a command group (warren proc, warren sessions).
type subcommand func(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error

// runSubcommands parses the group's client flags and runs the subcommand named first (def when none).
func runSubcommands(ctx context.Context, group, usage string, args []string, stdout, stderr io.Writer, subs map[string]subcommand, def ...string) error {
	fs := flag.NewFlagSet(group, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags()
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(usage+"\nflags:\n", ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 && len(def) > 0 {
		rest = def
	}
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("no command given")
	}
	if rest[0] == "help" {
		fs.Usage()
		return flag.ErrHelp
	}
	run, ok := subs[rest[0]]
	if !ok {
		fs.Usage()
		return fmt.Errorf("unknown command %q", rest[0])
	}
	return run(ctx, cf, rest[1:], stdout, stderr)
}

// subFlags is the flag set of one subcommand; it takes the client flags too.
func subFlags(group, usage string, cf *clientFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(group, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(fmt.Sprintf("usage: warren %s %s\n\nflags:\n", group, usage), ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	return fs
}

// connect parses a subcommand's flags and exactly n positional arguments, then makes the client.
func connect(fs *flag.FlagSet, cf *clientFlags, args []string, n int, what string) ([]string, *warren.Client, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if len(pos) != n {
		fs.Usage()
		return nil, nil, fmt.Errorf("want %s", what)
	}
	c, err := cf.client()
	return pos, c, err
}

func procStart(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "start [-cwd DIR] [-env K=V]... COMMAND [ARG...]", cf, stderr)
	cwd := fs.String("cwd", "", "working `DIR`ectory, relative to the workspace root")
	env := map[string]string{}
	fs.Func("env", "`K=V` added to the environment (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want K=V, got %q", s)
		}
		env[k] = v
		return nil
	})
	if err := fs.Parse(args); err != nil { // flags first: what follows COMMAND is its arguments
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("start takes a COMMAND")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	req := warren.ProcStartRequest{Command: fs.Arg(0), Args: fs.Args()[1:], Cwd: *cwd}
	if len(env) > 0 {
		req.Env = env
	}
	p, err := c.Sandbox().StartProcess(ctx, req)
	if err != nil {
		return clientError{err}
	}
	fmt.Fprintln(stdout, p.ID)
	return nil
}

func procList(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "ls [-json]", cf, stderr)
	asJSON := fs.Bool("json", false, "print the processes as JSON")
	_, c, err := connect(fs, cf, args, 0, "no arguments")
	if err != nil {
		return err
	}
	list, err := c.Sandbox().Processes(ctx)
	if err != nil {
		return clientError{err}
	}
	if *asJSON {
		return printJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tEXIT\tSTARTED\tCOMMAND")
	for _, p := range list {
		exit := "-"
		if p.ExitCode != nil {
			exit = fmt.Sprint(*p.ExitCode)
			if p.Ended != "" {
				exit += " (" + p.Ended + ")"
			}
		}
		cmd := strings.Join(append([]string{p.Command}, p.Args...), " ")
		if len(cmd) > 60 {
			cmd = cmd[:57] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, p.Status, exit, showWireTime(p.StartedAt), strings.ReplaceAll(cmd, "\n", " "))
	}
	return tw.Flush()
}

func procGet(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "get ID", cf, stderr)
	pos, c, err := connect(fs, cf, args, 1, "one process ID")
	if err != nil {
		return err
	}
	p, err := c.Sandbox().Process(ctx, pos[0])
	if err != nil {
		return clientError{err}
	}
	return printJSON(stdout, p)
}

func procLogs(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "logs [-f] [-offset N] ID", cf, stderr)
	follow := fs.Bool("f", false, "follow the output until the process exits")
	offset := fs.Int64("offset", 0, "start at byte `N` of the output")
	pos, c, err := connect(fs, cf, args, 1, "one process ID")
	if err != nil {
		return err
	}
	if !*follow {
		l, err := c.Sandbox().ProcessLogs(ctx, pos[0], *offset)
		if err != nil {
			return clientError{err}
		}
		writeChunks(l.Chunks, stdout, stderr)
		return nil
	}
	for ev, err := range c.Sandbox().FollowProcessLogs(ctx, pos[0], *offset) {
		if err != nil {
			return clientError{err}
		}
		if ev.Chunk != nil {
			writeChunks([]warren.ProcChunk{*ev.Chunk}, stdout, stderr)
		}
		if ev.Exit != nil && ev.Exit.ExitCode != nil {
			fmt.Fprintf(stderr, "process %s exited with %d\n", ev.Exit.ID, *ev.Exit.ExitCode)
		}
	}
	return nil
}

// writeChunks writes output chunks to stdout or stderr as the process wrote them.
func writeChunks(cs []warren.ProcChunk, stdout, stderr io.Writer) {
	for _, c := range cs {
		w := stdout
		if c.Stream == "stderr" {
			w = stderr
		}
		_, _ = io.WriteString(w, c.Data)
	}
}

func procWait(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "wait [-port P | -log PATTERN [-regex]] [-timeout D] ID", cf, stderr)
	port := fs.Int("port", 0, "wait until `P` listens in the sandbox")
	pattern := fs.String("log", "", "wait until a line of the output contains `PATTERN`")
	regex := fs.Bool("regex", false, "PATTERN is a regular expression (RE2)")
	timeout := fs.Duration("timeout", 0, "give up after this long (default: the runner's exec timeout)")
	pos, c, err := connect(fs, cf, args, 1, "one process ID")
	if err != nil {
		return err
	}
	req := warren.ProcWaitRequest{For: warren.WaitExit, Pattern: *pattern, Regex: *regex, TimeoutMs: timeout.Milliseconds()}
	switch {
	case *port != 0 && *pattern != "":
		return errors.New("-port and -log are exclusive")
	case *port != 0:
		req.For, req.Port = warren.WaitPort, *port
	case *pattern != "":
		req.For = warren.WaitLog
	}
	res, err := c.Sandbox().WaitProcess(ctx, pos[0], req)
	if err != nil {
		return clientError{err}
	}
	switch {
	case req.For == warren.WaitLog:
		fmt.Fprintln(stdout, res.Line)
	case req.For == warren.WaitExit && res.Proc.ExitCode != nil:
		fmt.Fprintf(stdout, "exited with %d\n", *res.Proc.ExitCode)
	default:
		fmt.Fprintf(stdout, "port %d listens\n", *port)
	}
	return nil
}

func procSignal(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "signal ID SIGNAL", cf, stderr)
	pos, c, err := connect(fs, cf, args, 2, "a process ID and a SIGNAL")
	if err != nil {
		return err
	}
	return sendSignal(ctx, c, pos[0], pos[1])
}

func procKill(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "kill ID", cf, stderr)
	pos, c, err := connect(fs, cf, args, 1, "one process ID")
	if err != nil {
		return err
	}
	return sendSignal(ctx, c, pos[0], "KILL")
}

func sendSignal(ctx context.Context, c *warren.Client, id, sig string) error {
	if _, err := c.Sandbox().SignalProcess(ctx, id, sig); err != nil {
		return clientError{err}
	}
	return nil
}

func procStdin(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "stdin [-close] ID", cf, stderr)
	closeAfter := fs.Bool("close", false, "close the process's stdin after the copy")
	pos, c, err := connect(fs, cf, args, 1, "one process ID")
	if err != nil {
		return err
	}
	// Standard input travels in writes of at most 1 MiB, each taken by the process before the next.
	buf := make([]byte, 1<<20)
	for {
		n, rerr := io.ReadFull(clientStdin, buf)
		last := rerr != nil
		if n > 0 || (last && *closeAfter) {
			if err := c.Sandbox().WriteStdin(ctx, pos[0], buf[:n], last && *closeAfter); err != nil {
				return clientError{err}
			}
		}
		if last {
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				return nil
			}
			return rerr
		}
	}
}

func procRemove(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("proc", "rm ID", cf, stderr)
	pos, c, err := connect(fs, cf, args, 1, "one process ID")
	if err != nil {
		return err
	}
	if err := c.Sandbox().RemoveProcess(ctx, pos[0]); err != nil {
		return clientError{err}
	}
	return nil
}

const sessionsUsage = `usage: warren sessions [-url U] [-token T] [COMMAND ...]

commands:
  ls [-json]            list your conversations, the most recent first (the default)
  rm ID                 delete a conversation (refused while a client is attached or a turn runs)

Resume one with: warren chat -resume ID
`

func runSessions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runSubcommands(ctx, "sessions", sessionsUsage, args, stdout, stderr, map[string]subcommand{
		"ls": sessionsList, "rm": sessionsRemove,
	}, "ls")
}

func sessionsList(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("sessions", "ls [-json]", cf, stderr)
	asJSON := fs.Bool("json", false, "print the sessions as JSON")
	_, c, err := connect(fs, cf, args, 0, "no arguments")
	if err != nil {
		return err
	}
	list, err := c.Sessions(ctx)
	if err != nil {
		return clientError{err}
	}
	if *asJSON {
		return printJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLAST TURN\tCOST USD\tTITLE")
	for _, s := range list {
		title := s.Title
		if title == "" {
			title = s.FirstPrompt
		}
		if len([]rune(title)) > 60 {
			title = string([]rune(title)[:57]) + "..."
		}
		last := showWireTime(s.LastTurn)
		if s.Live {
			last += " (live)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t%s\n", s.ID, last, float64(s.CostMicros)/1e6, strings.ReplaceAll(title, "\n", " "))
	}
	return tw.Flush()
}

func sessionsRemove(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := subFlags("sessions", "rm ID", cf, stderr)
	pos, c, err := connect(fs, cf, args, 1, "one session ID")
	if err != nil {
		return err
	}
	if err := c.DeleteSession(ctx, pos[0]); err != nil {
		return clientError{err}
	}
	return nil
}
