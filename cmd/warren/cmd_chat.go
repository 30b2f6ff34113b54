package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("chat", "talk to the agent in your sandbox: warren chat [-p PROMPT] [-resume ID] [-fork]", runChat)
}

// chatSignals delivers the signals warren chat reacts to (tests replace it). main's context is cancelled
// by the first Ctrl-C, but for chat that Ctrl-C means "interrupt the turn", so chat watches the signals
// itself and does not let main's context end the session.
var chatSignals = func() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

const (
	chatInterruptTimeout = 5 * time.Second
	chatTick             = 100 * time.Millisecond
	chatMaxPromptLine    = 1 << 20
	exitInterrupted      = 130 // as a shell reports a command ended by Ctrl-C
)

// chatUsage is warren chat -h's text before the flags.
const chatUsage = `usage: warren chat [flags]

Talks to the Claude Code agent in your sandbox. With -p it sends one prompt, prints the agent's work as it
happens and exits when the turn ends (exit status 1 if it ended in an error). Without -p it reads prompts
from standard input, one a line, until end of input (Ctrl-D). Ctrl-C during a turn interrupts the agent;
a second Ctrl-C quits.

The session id is printed when the session opens: pass it to -resume to continue the conversation later,
with -fork to branch it.

flags:
`

// chatFlags are warren chat's flags.
type chatFlags struct {
	cf                                                     *clientFlags
	prompt, resume, model, system, appendSystem, transport string
	fork, cont, jsonOut, quiet                             bool
	maxTurns                                               int
	oneShot                                                bool // -p was given
}

func (f *chatFlags) register(fs *flag.FlagSet) {
	f.cf = newClientFlags()
	f.cf.register(fs)
	fs.StringVar(&f.prompt, "p", "", "send `PROMPT`, print the answer and exit; - reads the prompt from standard input")
	fs.StringVar(&f.resume, "resume", "", "continue the conversation of session `ID`")
	fs.BoolVar(&f.fork, "fork", false, "with -resume or -continue: continue under a new session id, leaving the original as it was")
	fs.BoolVar(&f.cont, "continue", false, "continue your most recent session")
	fs.StringVar(&f.model, "model", "", "the `MODEL` the agent uses (the token may pin one)")
	fs.IntVar(&f.maxTurns, "max-turns", 0, "stop a prompt after `N` agent turns (0: only the token's limit)")
	fs.StringVar(&f.system, "system", "", "replace Claude Code's system prompt with `TEXT`")
	fs.StringVar(&f.appendSystem, "append-system", "", "add `TEXT` to the end of Claude Code's system prompt")
	fs.BoolVar(&f.jsonOut, "json", false, "print every event as one JSON line: Claude Code's stream-json with Warren's additions")
	fs.StringVar(&f.transport, "transport", env.Or("WARREN_TRANSPORT", "auto"), "the agent channel's `TRANSPORT`: auto (WebTransport when the edge offers it and UDP gets through, else WebSocket), webtransport or websocket ($WARREN_TRANSPORT)")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the agent's text and problems: no tool calls, progress or cost")
}

// check checks the parsed flags, reads -p - from standard input, and returns the transport.
func (f *chatFlags) check(fs *flag.FlagSet) (warren.Transport, error) {
	f.oneShot = flagSet(fs, "p")
	switch {
	case fs.NArg() > 0:
		fs.Usage()
		return "", fmt.Errorf("unexpected argument %q: pass a prompt with -p", fs.Arg(0))
	case f.fork && f.resume == "" && !f.cont:
		return "", errors.New("-fork needs the session to fork: -resume ID or -continue")
	case f.resume != "" && f.cont:
		return "", errors.New("use one of -resume and -continue")
	case f.system != "" && f.appendSystem != "":
		return "", errors.New("use one of -system and -append-system")
	case f.maxTurns < 0:
		return "", errors.New("-max-turns must not be negative")
	}
	tr, err := warren.ParseTransport(f.transport)
	if err != nil {
		return "", fmt.Errorf("-transport: %w", err)
	}
	if f.oneShot && f.prompt == "-" {
		b, err := io.ReadAll(clientStdin)
		if err != nil {
			return "", fmt.Errorf("read the prompt from standard input: %w", err)
		}
		f.prompt = string(b)
	}
	if f.oneShot && strings.TrimSpace(f.prompt) == "" {
		return "", errors.New("-p: the prompt is empty")
	}
	return tr, nil
}

// options are the session's options from the flags.
func (f *chatFlags) options() *warren.SessionOptions {
	opts := &warren.SessionOptions{
		Model:                  f.model,
		MaxTurns:               f.maxTurns,
		SessionID:              f.resume,
		ForkSession:            f.fork,
		Continue:               f.cont,
		IncludePartialMessages: true,
	}
	switch {
	case f.system != "":
		opts.SystemPrompt = &warren.SystemPrompt{Text: f.system}
	case f.appendSystem != "":
		opts.SystemPrompt = &warren.SystemPrompt{Type: "preset", Preset: "claude_code", Append: f.appendSystem}
	}
	return opts
}

func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f chatFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(chatUsage, ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	tr, err := f.check(fs)
	if err != nil {
		return err
	}
	c, err := f.cf.client(warren.WithTransport(tr, 0))
	if err != nil {
		return err
	}
	view := newChatView(stdout, stderr, chatViewConfig{
		json:     f.jsonOut,
		quiet:    f.quiet,
		progress: isTerminal(stderr),
	})
	// The session lives until the user quits (see chatSignals), not until main's context ends.
	runCtx, quit := context.WithCancel(context.WithoutCancel(ctx))
	defer quit()
	ch := &chatRun{view: view, stop: quit}
	defer ch.watchSignals()()
	s, err := c.Dial(runCtx, f.options())
	if err != nil {
		if ch.quitting() {
			return exitError{exitInterrupted}
		}
		return clientError{err}
	}
	defer s.Close()
	ch.setSession(s)
	if !f.quiet {
		printOpened(stderr, s)
	}
	if f.oneShot {
		res, err := ch.turn(runCtx, f.prompt)
		return ch.oneShotError(res, err)
	}
	return ch.interactive(runCtx, clientStdin, stderr)
}

// watchSignals hands the signals chat reacts to (chatSignals) to c until the returned stop is called.
func (c *chatRun) watchSignals() (stop func()) {
	sigs, stopSignals := chatSignals()
	sigDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case sig := <-sigs:
				c.signal(sig)
			case <-sigDone:
				return
			}
		}
	})
	return func() {
		close(sigDone)
		wg.Wait()
		stopSignals()
	}
}

// printOpened says which session opened, how to continue it, and the platform's notice.
func printOpened(stderr io.Writer, s *warren.Session) {
	model := ""
	if s.Model() != "" {
		model = " (" + s.Model() + ")"
	}
	fmt.Fprintf(stderr, "warren chat: session %s%s over %s; continue it later with -resume %s\n", s.ID(), model, s.Transport(), s.ID())
	if n := s.Notice(); n != "" {
		fmt.Fprintf(stderr, "warren chat: NOTE: %s\n", n)
	}
}

// oneShotError is how warren chat -p ends after its turn: 130 when interrupted, 1 when the turn failed.
func (c *chatRun) oneShotError(res *warren.ResultEvent, err error) error {
	switch {
	case c.view.Err() != nil:
		return fmt.Errorf("write standard output: %w", c.view.Err())
	case c.quitting():
		return exitError{exitInterrupted}
	case err != nil:
		return clientError{err}
	case res == nil || c.interruptedTurn():
		return exitError{exitInterrupted}
	case resultFailed(res):
		return exitError{1}
	}
	return nil
}

// chatRun is one warren chat session: the turns, and what Ctrl-C does during them.
type chatRun struct {
	view *chatView
	stop context.CancelFunc // ends the context of the session's calls: the user quits

	mu          sync.Mutex
	s           *warren.Session
	inTurn      bool
	interrupted bool // the running turn was interrupted
	quit        bool // the user asked to quit
}

func (c *chatRun) setSession(s *warren.Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s = s
}

func (c *chatRun) session() *warren.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// interruptedTurn reports whether the user interrupted the last turn.
func (c *chatRun) interruptedTurn() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interrupted
}

func (c *chatRun) quitting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.quit
}

// signal handles Ctrl-C and SIGTERM. The first Ctrl-C during a turn interrupts the turn; any other quits.
func (c *chatRun) signal(sig os.Signal) {
	c.mu.Lock()
	s := c.s
	interrupt := sig == os.Interrupt && c.inTurn && !c.interrupted && !c.quit
	if interrupt {
		c.interrupted = true
	} else {
		c.quit = true
	}
	c.mu.Unlock()
	if !interrupt {
		c.stop()
		return
	}
	c.view.Notice("warren chat: interrupting the agent (Ctrl-C again to quit)")
	ctx, cancel := context.WithTimeout(context.Background(), chatInterruptTimeout)
	defer cancel()
	if err := s.Interrupt(ctx); err != nil {
		c.view.Problem("warren chat: could not interrupt the agent: %s", describeError(err))
	}
}

// turn sends one prompt and renders the agent's events until the turn ends. The result is nil when the
// turn ended without one (it was interrupted).
func (c *chatRun) turn(ctx context.Context, prompt string) (*warren.ResultEvent, error) {
	c.mu.Lock()
	s := c.s
	c.inTurn, c.interrupted = true, false
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inTurn = false
		c.mu.Unlock()
	}()

	c.view.Begin()
	stopTicker := c.tick()
	var res *warren.ResultEvent
	var err error
	for ev, e := range s.Prompt(ctx, prompt) {
		if e != nil {
			err = e
			break
		}
		c.view.Event(ev)
		if r, ok := ev.Result(); ok {
			res = r
		}
		// A tool_call is for the client that declared the tool (a warren possess host, say): chat declares
		// none and leaves every call to it, since the first answer wins (the view shows the call).
	}
	stopTicker()
	c.view.End()

	c.mu.Lock()
	abandon := c.quit && !c.interrupted && res == nil
	c.mu.Unlock()
	if abandon {
		// Quitting mid-turn: stop the agent rather than leave it working for nobody.
		ictx, cancel := context.WithTimeout(context.Background(), chatInterruptTimeout)
		_ = s.Interrupt(ictx)
		cancel()
	}
	return res, err
}

// tick redraws the progress line until the returned func is called.
func (c *chatRun) tick() (stop func()) {
	if !c.view.cfg.progress {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(chatTick)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				c.view.Tick()
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// interactive reads prompts from in, one a line, and runs a turn for each until end of input or quit.
func (c *chatRun) interactive(ctx context.Context, in io.Reader, stderr io.Writer) error {
	tty := isTerminal(in)
	if tty && !c.view.cfg.quiet {
		fmt.Fprintln(stderr, "Type a prompt and press Enter. Ctrl-C interrupts the agent; Ctrl-D quits.")
	}
	// A read of standard input cannot be cancelled: when chat quits while the reader waits for a line, the
	// reader is left behind and ends with the process.
	done := make(chan struct{})
	defer close(done)
	lines := make(chan string)
	var readErr error
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), chatMaxPromptLine)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
		readErr = sc.Err()
	}()

	for {
		if tty {
			fmt.Fprint(stderr, "> ")
		}
		var line string
		select {
		case <-ctx.Done():
			if tty {
				fmt.Fprintln(stderr)
			}
			return exitError{exitInterrupted}
		case l, ok := <-lines:
			if !ok {
				if tty {
					fmt.Fprintln(stderr)
				}
				if readErr != nil {
					return fmt.Errorf("read standard input: %w", readErr)
				}
				return nil
			}
			line = l
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		_, err := c.turn(ctx, line)
		switch {
		case c.view.Err() != nil:
			return fmt.Errorf("write standard output: %w", c.view.Err())
		case c.quitting():
			return exitError{exitInterrupted}
		case err == nil:
		case c.session().Err() != nil || errors.Is(err, warren.ErrClosed):
			return clientError{err} // the session is over
		default:
			c.view.Problem("warren chat: %s", describeError(err))
		}
	}
}

// isTerminal reports whether f is a terminal (a character device: close enough without a dependency).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	fi, err := file.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
