package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	warren "github.com/warren-mesh/warren/sdk"
)

// chatView renders the agent's events for a person. out gets the transcript: the agent's text as it
// arrives, its tool calls and a line about each result. info gets what is about the session rather than
// the conversation: notices, problems, the cost of each turn and, when it is a terminal, a progress line.
// Both usually end up on the same terminal, so the view keeps track of whether the cursor is mid-line.
//
// The methods are safe for concurrent use: runChat feeds events from its loop and ticks the progress line
// from a timer.
type chatView struct {
	mu    sync.Mutex
	out   io.Writer
	info  io.Writer
	cfg   chatViewConfig
	err   error // the first failed write to out
	frame int

	midLine  bool // the last thing written to the terminal did not end a line
	spinning bool // the progress line is on screen

	// The turn in progress.
	inTurn     bool
	started    time.Time
	state      string // from session_info
	activity   string // what the agent is doing, for the progress line
	cwd        string // the agent's working directory, to shorten paths
	curMsg     string // id of the message being streamed
	streamed   map[string]bool
	unclaimed  bool              // text deltas arrived that no assistant message has accounted for yet
	blockText  bool              // the current content block printed text deltas
	toolIndent map[string]string // tool_use id → indentation of its line (subagents are indented)
}

type chatViewConfig struct {
	json     bool // print each event as one JSON line on out, and nothing else there
	quiet    bool // print only the agent's text (and problems)
	progress bool // draw a progress line on info (info is a terminal)
	now      func() time.Time
}

func newChatView(out, info io.Writer, cfg chatViewConfig) *chatView {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	v := &chatView{out: out, info: info, cfg: cfg}
	v.reset()
	return v
}

// reset forgets the turn before.
func (v *chatView) reset() {
	v.state, v.activity, v.curMsg = "", "", ""
	v.streamed = map[string]bool{}
	v.unclaimed, v.blockText = false, false
	v.toolIndent = map[string]string{}
}

// Err is the first error writing the transcript (a closed pipe, say).
func (v *chatView) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// Begin starts a turn: the agent is about to work on a prompt.
func (v *chatView) Begin() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reset()
	v.inTurn = true
	v.started = v.cfg.now()
	v.drawProgress()
}

// End finishes the turn, whether or not a result came: the line is ended and the progress line cleared.
func (v *chatView) End() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endLine()
	v.clearProgress()
	v.inTurn = false
}

// Tick advances the progress line.
func (v *chatView) Tick() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.frame++
	v.drawProgress()
}

// Notice prints a line about the session on info (without -quiet).
func (v *chatView) Notice(format string, args ...any) {
	if v.cfg.quiet {
		return
	}
	v.Problem(format, args...)
}

// Problem prints a line on info even with -quiet: something went wrong.
func (v *chatView) Problem(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endLine()
	v.clearProgress()
	fmt.Fprintf(v.info, format+"\n", args...)
	v.drawProgress()
}

// Event renders one server message.
func (v *chatView) Event(ev warren.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cfg.json {
		v.clearProgress()
		v.write(string(ev.Raw) + "\n")
		if r, ok := ev.Result(); ok {
			v.result(r)
		}
		return
	}
	switch {
	case ev.Type == warren.EventStream:
		if se, ok := ev.StreamEvent(); ok {
			v.streamEvent(se)
		}
	case ev.Type == warren.EventAssistant:
		if a, ok := ev.Assistant(); ok {
			v.assistant(a)
		}
	case ev.Type == warren.EventUser:
		if u, ok := ev.User(); ok {
			v.user(u)
		}
	case ev.Type == warren.EventResult:
		if r, ok := ev.Result(); ok {
			v.endLine()
			v.result(r)
		}
	case ev.Type == warren.EventSystem:
		if sys, ok := ev.System(); ok {
			switch sys.Subtype {
			case "init":
				v.cwd = sys.Cwd
			case "compact_boundary":
				v.toolLine("", "(the conversation was compacted to fit the context window)")
			}
		}
	case ev.Type == warren.EventToolCall:
		if call, ok := ev.ToolCall(); ok {
			v.toolLine("", "⏺ "+toolTitle(call.AgentName(), call.Input, v.cwd))
			v.toolLine("", "  ⎿  "+chatOthersTool)
		}
	default:
		if info, ok := ev.SessionInfo(); ok {
			v.state = info.State
		}
	}
	v.drawProgress()
}

// chatOthersTool is what warren chat shows under a tool_call: it declares no tools, so the call is for
// another client of the session (a warren possess host), which answers it.
const chatOthersTool = "runs in the client that declared it"

func (v *chatView) streamEvent(se *warren.StreamEvent) {
	if se.ParentToolUseID != "" {
		return // a subagent's partial messages; its tool calls are shown from its complete messages
	}
	e := se.Event
	switch e.Type {
	case "message_start":
		if e.Message != nil {
			v.curMsg = e.Message.ID
		}
	case "content_block_start":
		if e.ContentBlock != nil && e.ContentBlock.Type == warren.BlockThinking {
			v.activity = "thinking"
		}
	case "content_block_delta":
		if text, ok := se.TextDelta(); ok && text != "" {
			v.activity = ""
			v.streamed[v.curMsg] = true
			v.unclaimed, v.blockText = true, true
			v.write(text)
		}
	case "content_block_stop":
		if v.blockText {
			v.endLine()
			v.blockText = false
		}
	}
}

// assistant prints a complete message of the model. Its text was already printed when it was streamed
// (stream_event deltas of the same message id, or deltas no message has claimed yet when the ids are
// missing), so only the text of messages that were not streamed is printed here.
func (v *chatView) assistant(a *warren.AssistantEvent) {
	indent := ""
	if a.ParentToolUseID != "" {
		indent = "  "
	} else if text := a.Text(); text != "" {
		streamed := v.unclaimed || (a.Message.ID != "" && v.streamed[a.Message.ID])
		v.unclaimed = false
		if !streamed {
			v.activity = ""
			v.endLine()
			v.write(text)
			v.endLine()
		}
	}
	for _, use := range a.ToolUses() {
		v.toolIndent[use.ID] = indent
		v.toolLine(indent, "⏺ "+toolTitle(use.Name, use.Input, v.cwd))
		v.activity = "running " + displayToolName(use.Name)
	}
}

func (v *chatView) user(u *warren.UserEvent) {
	for _, r := range u.ToolResults() {
		indent, ok := v.toolIndent[r.ToolUseID]
		if !ok && u.ParentToolUseID != "" {
			indent = "  "
		}
		v.toolLine(indent, "  ⎿  "+resultSummary(r))
		v.activity = ""
	}
}

func (v *chatView) result(r *warren.ResultEvent) {
	v.clearProgress()
	v.inTurn = false
	if resultFailed(r) {
		fmt.Fprintf(v.info, "warren chat: %s\n", resultProblem(r))
	}
	if !v.cfg.quiet && !v.cfg.json {
		fmt.Fprintln(v.info, costLine(r))
	}
}

// toolLine prints one line of tool activity in the transcript (not with -quiet).
func (v *chatView) toolLine(indent, line string) {
	if v.cfg.quiet {
		return
	}
	v.endLine()
	v.write(indent + line + "\n")
}

// endLine ends the line the agent's text left open.
func (v *chatView) endLine() {
	if v.midLine {
		v.write("\n")
	}
}

func (v *chatView) write(s string) {
	if s == "" {
		return
	}
	v.clearProgress()
	if _, err := io.WriteString(v.out, s); err != nil && v.err == nil {
		v.err = err
	}
	v.midLine = !strings.HasSuffix(s, "\n")
}

var spinnerFrames = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

// drawProgress shows what the agent is doing and for how long, on a line of its own that the next output
// erases. It is not drawn mid-line: it would overwrite the agent's unfinished line of text.
func (v *chatView) drawProgress() {
	if !v.cfg.progress || v.cfg.json || v.cfg.quiet || !v.inTurn || v.midLine {
		return
	}
	what := v.activity
	if what == "" {
		// The sandbox is up by the time a turn starts: only waiting_tool says something more than working.
		what = "working"
		if v.state == warren.StateWaitingTool {
			what = "waiting for a tool"
		}
	}
	secs := int(v.cfg.now().Sub(v.started).Seconds())
	f := spinnerFrames[v.frame%len(spinnerFrames)]
	fmt.Fprintf(v.info, "\r\x1b[K%c %s… %ds (Ctrl-C to interrupt)", f, what, secs)
	v.spinning = true
}

func (v *chatView) clearProgress() {
	if v.spinning {
		io.WriteString(v.info, "\r\x1b[K")
		v.spinning = false
	}
}

// toolTitle is a tool call as one short line: Bash(go test ./...), Write(hello.txt).
func toolTitle(name string, input json.RawMessage, cwd string) string {
	arg := toolArg(name, input, cwd)
	if arg == "" {
		return displayToolName(name)
	}
	return displayToolName(name) + "(" + arg + ")"
}

// displayToolName shows an MCP tool (mcp__server__tool) as server.tool.
func displayToolName(name string) string {
	if rest, ok := strings.CutPrefix(name, "mcp__"); ok {
		return strings.Replace(rest, "__", ".", 1)
	}
	return name
}

// toolArg picks the argument that says what a call does: the command, the file, the pattern. Host tools
// (HostBash, HostRead, ...) take the same arguments as the agent's own.
func toolArg(name string, input json.RawMessage, cwd string) string {
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return ""
	}
	str := func(k string) string {
		s, _ := in[k].(string)
		return s
	}
	rel := func(p string) string {
		if cwd != "" {
			if r, ok := strings.CutPrefix(p, strings.TrimSuffix(cwd, "/")+"/"); ok && r != "" {
				return r
			}
		}
		return p
	}
	var arg string
	switch strings.TrimPrefix(name, "Host") {
	case "Bash":
		arg = str("command")
	case "Read", "Write", "Edit", "MultiEdit":
		arg = rel(str("file_path"))
	case "NotebookEdit":
		arg = rel(str("notebook_path"))
	case "Glob", "Grep":
		arg = str("pattern")
		if p := str("path"); p != "" {
			arg += " in " + rel(p)
		}
	case "WebFetch":
		arg = str("url")
	case "WebSearch":
		arg = str("query")
	case "Task", "Agent":
		arg = str("description")
	case "TodoWrite":
		if todos, ok := in["todos"].([]any); ok {
			arg = strconv.Itoa(len(todos)) + " todos"
		}
	default:
		// The first string argument, in a stable order.
		keys := make([]string, 0, len(in))
		for k := range in {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if s := str(k); s != "" {
				arg = s
				break
			}
		}
	}
	return clip(arg, 60)
}

// resultSummary is a tool result as one line: its first line, and how many more there are.
func resultSummary(b warren.ContentBlock) string {
	text := b.ResultText()
	if inner, ok := strings.CutPrefix(strings.TrimSpace(text), "<tool_use_error>"); ok {
		text = strings.TrimSuffix(inner, "</tool_use_error>")
	}
	var lines []string
	for l := range strings.SplitSeq(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		if b.IsError {
			return "Error"
		}
		return "(no output)"
	}
	first := clip(lines[0], 100)
	if b.IsError && !strings.HasPrefix(strings.ToLower(first), "error") {
		first = "Error: " + first
	}
	if n := len(lines) - 1; n == 1 {
		first += " … +1 line"
	} else if n > 1 {
		first += fmt.Sprintf(" … +%d lines", n)
	}
	return first
}

// clip keeps the first line of s, at most n runes of it.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	line, rest, multi := strings.Cut(s, "\n")
	line = strings.TrimSpace(line)
	if utf8.RuneCountInString(line) > n {
		r := []rune(line)
		return string(r[:n-1]) + "…"
	}
	if multi && strings.TrimSpace(rest) != "" {
		return line + " …"
	}
	return line
}

// resultFailed reports whether a turn ended in an error (warren chat -p then exits with status 1).
func resultFailed(r *warren.ResultEvent) bool {
	return r.IsError || (r.Subtype != "" && r.Subtype != warren.ResultSuccess)
}

// resultProblem says why a turn ended early.
func resultProblem(r *warren.ResultEvent) string {
	detail := strings.Join(r.Errors, "; ")
	if detail == "" {
		detail = clip(r.Result, 200)
	}
	var s string
	switch r.Subtype {
	case warren.ResultErrorMaxBudget:
		return "the budget ran out during this turn (raise the user's quota or wait for the budget window to reset)"
	case warren.ResultErrorMaxTurns:
		return fmt.Sprintf("the agent stopped after %d turns, the limit for one prompt (raise -max-turns, if the token allows)", r.NumTurns)
	case warren.ResultErrorDuringExecution:
		s = "the agent failed"
	case warren.ResultSuccess:
		s = "the agent reported an error"
	default:
		s = "the turn ended early (" + r.Subtype + ")"
	}
	if detail != "" {
		s += ": " + detail
	}
	return s
}

// costLine is what the turn cost. "in" counts every input token the model read, from the cache or not.
func costLine(r *warren.ResultEvent) string {
	usd := r.TotalCostUSD
	in := r.Usage.InputTokens + r.Usage.CacheReadInputTokens + r.Usage.CacheCreationInputTokens
	out := r.Usage.OutputTokens
	compute := ""
	if r.Cost != nil {
		usd = r.Cost.USD()
		if t := r.Cost.Total(); t != (warren.ModelCost{}) {
			in = t.InputTokens + t.CacheReadInputTokens + t.CacheCreationInputTokens
			out = t.OutputTokens
		}
		if r.Cost.ComputeSeconds > 0 {
			compute = fmt.Sprintf(", %.1f s compute", r.Cost.ComputeSeconds)
		}
	}
	return fmt.Sprintf("cost: $%.4f (%s in / %s out tokens%s)", usd, thousands(in), thousands(out), compute)
}

// thousands formats n with comma separators: 1234567 → 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
