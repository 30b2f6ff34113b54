package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/strictjson"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("possess", "let the agent work on this machine: warren possess [-root DIR] [-session ID] [-yes]", runPossess)
}

// possessMaxShown bounds how much of a call's input the confirmation shows.
const possessMaxShown = 4000

func runPossess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("possess", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags()
	cf.register(fs)
	root := fs.String("root", ".", "the `DIR` the agent's host tools work in")
	session := fs.String("session", "", "attach to session `ID` (default: open a new session)")
	yes := fs.Bool("yes", false, "run every call without asking")
	help.Set(fs, `usage: warren possess [flags]

Connects to your agent session as its host: the agent gets the tools HostBash, HostRead, HostWrite,
HostEdit, HostGlob and HostGrep (mcp__host__*), which run here, on this machine, in DIR. Paths are
confined to DIR (no "..", no absolute path outside it, no symlink leading out); HostBash runs a shell
command starting in DIR, and is confined only by your confirmation. Every call is shown and runs only if
you answer y, unless -yes.

Without -session a new session is opened; prompt it from another terminal with
'warren chat -resume ID'. With -session ID the host attaches to that session, and the agent has the
tools from its next turn. Ctrl-C ends possession.`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	dir, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	p := &possessRun{out: stderr, answers: lineReader(ctx, clientStdin)}
	confirm := p.confirm
	if *yes {
		confirm = nil
	}
	tools, err := warren.HostTools(dir, confirm)
	if err != nil {
		return err
	}
	p.report(tools)
	s, err := c.DialHost(ctx, *session, dir, tools)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return clientError{err}
	}
	defer s.Close()
	fmt.Fprintf(stdout, "%s\n", s.ID())
	p.say("warren possess: host of session %s, tools working in %s; prompt the agent with: warren chat -resume %s", s.ID(), dir, s.ID())
	if *yes {
		p.say("warren possess: -yes: every call runs without asking")
	}
	err = s.ServeHost(ctx, tools, p.event)
	switch {
	case ctx.Err() != nil:
		p.say("warren possess: stopped")
		return nil
	case err != nil:
		return clientError{err}
	}
	return nil
}

// possessRun is one warren possess: what it shows, and the answers to its questions.
type possessRun struct {
	out     io.Writer
	answers <-chan string // lines of standard input; closed at its end
	mu      sync.Mutex    // serializes writes to out
}

func (p *possessRun) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// event shows the calls of tools another client declared, which this host leaves alone.
func (p *possessRun) event(ev warren.Event) {
	if call, ok := ev.ToolCall(); ok && !strings.HasPrefix(call.AgentName(), "mcp__"+warren.HostServerName+"__") {
		p.say("  (%s is another client's tool)", printable(call.AgentName()))
	}
	if e := ev.Err(); e != nil {
		p.say("warren possess: %s", printable(describeError(e)))
	}
}

// report wraps each tool's handler to show the call and how it ended.
func (p *possessRun) report(tools *warren.ToolServer) {
	for i := range tools.Tools {
		t := &tools.Tools[i]
		run := t.Handler
		name := t.Name
		t.Handler = func(ctx context.Context, input json.RawMessage) (warren.ToolResult, error) {
			res, err := run(ctx, input)
			switch {
			case err != nil:
				p.say("  ⎿  %s: %s", name, printable(firstLine(err.Error()))) // the model's paths and text
			default:
				p.say("  ⎿  %s: done", name)
			}
			return res, err
		}
	}
}

// confirm shows a call and asks whether it may run; anything but y or yes denies it, as does the end of
// standard input or of the session.
func (p *possessRun) confirm(ctx context.Context, call warren.HostCall) bool {
	p.say("⏺ %s %s", call.Tool, shown(call.Input))
	p.mu.Lock()
	fmt.Fprint(p.out, "  run it? [y/N] ")
	p.mu.Unlock()
	select {
	case a, ok := <-p.answers:
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case !ok:
			p.say("\n  (no answer: end of input)")
		case !isTerminal(clientStdin):
			p.say("%s", a) // a terminal echoed it already
		}
		return ok && (a == "y" || a == "yes")
	case <-ctx.Done():
		return false
	}
}

// shown is a call's input as the confirmation prints it: compact JSON (no carriage return or other
// whitespace between tokens that could redraw the line), every rune that is not printable (control and
// format characters such as bidirectional overrides) escaped. The fields that say what runs and where
// (command, file_path, path, pattern, ...) come first and are shown whole, whatever order the model wrote
// them in; only the bulk text (content, old_string, new_string) is clipped, to possessMaxShown bytes each.
// What the user reads is what runs: a path or a command cannot hide behind a long field.
func shown(input json.RawMessage) string {
	var fields map[string]json.RawMessage
	if strictjson.Unmarshal(input, &fields) != nil {
		var b bytes.Buffer
		if json.Compact(&b, input) != nil {
			b.Reset()
			b.Write(input)
		}
		return clipped(printable(b.String()))
	}
	keys := slices.Sorted(maps.Keys(fields))
	bulk := func(k string) int {
		if possessBulk[k] {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(keys, func(a, b string) int { return cmp.Compare(bulk(a), bulk(b)) })
	var out strings.Builder
	out.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			out.WriteString(",")
		}
		var v bytes.Buffer
		if json.Compact(&v, fields[k]) != nil {
			v.Reset()
			v.Write(fields[k])
		}
		kb, _ := json.Marshal(k)
		out.WriteString(printable(string(kb)) + ":")
		if possessBulk[k] {
			out.WriteString(clipped(printable(v.String())))
		} else {
			out.WriteString(printable(v.String()))
		}
	}
	out.WriteString("}")
	return out.String()
}

// possessBulk are the fields of the host tools' inputs that carry text to write, not what runs or where.
var possessBulk = map[string]bool{"content": true, "old_string": true, "new_string": true}

// clipped keeps at most possessMaxShown bytes of s (whole characters), saying how long s was.
func clipped(s string) string {
	if len(s) <= possessMaxShown {
		return s
	}
	cut := possessMaxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("... (%d bytes in all)", len(s))
}

// printable escapes every rune of s that is not printable (control characters, escape sequences,
// bidirectional overrides), and invalid UTF-8, so that what reaches the terminal is only text.
func printable(s string) string {
	var out strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsPrint(r) {
			out.WriteRune(r)
		} else {
			fmt.Fprintf(&out, "\\u%04x", r)
		}
	}
	return out.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// lineReader delivers the lines of in until its end (then closes) or ctx ends. A read of standard input
// cannot be cancelled: the reader is left behind and ends with the process.
func lineReader(ctx context.Context, in io.Reader) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return lines
}
