package modelserver

import (
	"encoding/json"
	"path"
	"regexp"
	"sort"
	"strings"
)

// reply is one scripted assistant message.
type reply struct {
	blocks []replyBlock
	// outputTokens overrides the estimate reported in usage when positive.
	outputTokens int
	// slow spaces the SSE events by Options.Delay and streams text one word per delta.
	slow bool
}

// replyBlock is a text block (name empty) or a tool_use block.
type replyBlock struct {
	text  string
	name  string
	input map[string]any
}

func (r reply) stopReason() string {
	for _, b := range r.blocks {
		if b.name != "" {
			return "tool_use"
		}
	}
	return "end_turn"
}

func text(s string) reply { return reply{blocks: []replyBlock{{text: s}}} }

func toolUse(blocks ...replyBlock) reply { return reply{blocks: blocks} }

// doneText ends every tool-using scenario.
const doneText = "Done."

// writeTool is a Write call. The CLI's Write tool wants an absolute file_path, so relative paths are made
// absolute under the working directory the CLI reports.
func writeTool(c conversation, file, content string) replyBlock {
	return replyBlock{name: "Write", input: map[string]any{"file_path": absPath(c.cwd, file), "content": content}}
}

func bashTool(command, description string) replyBlock {
	return replyBlock{name: "Bash", input: map[string]any{"command": command, "description": description}}
}

func absPath(cwd, p string) string {
	if cwd == "" || path.IsAbs(p) {
		return p
	}
	return path.Join(cwd, p)
}

// scenarios maps a scenario name to the reply for a conversation at some step. Scenarios other than
// "auto" ignore the prompt.
var scenarios = map[string]func(c conversation) reply{
	"auto": auto,
	"plain": func(conversation) reply {
		return text("Hello from the Warren model server. This answer is scripted and arrives in several deltas.")
	},
	"write": func(c conversation) reply {
		if c.step == 0 {
			return toolUse(writeTool(c, "hello.txt", "hi"))
		}
		return text(doneText)
	},
	"bash": func(c conversation) reply {
		if c.step == 0 {
			return toolUse(bashTool("echo from-bash > bash.txt && cat bash.txt", "Write and show bash.txt"))
		}
		return text(doneText)
	},
	"write_bash": func(c conversation) reply {
		switch c.step {
		case 0:
			return toolUse(writeTool(c, "hello.txt", "hi"))
		case 1:
			return toolUse(bashTool("cat hello.txt", "Show hello.txt"))
		}
		return text(doneText)
	},
	"two_tools": func(c conversation) reply {
		if c.step == 0 {
			return toolUse(writeTool(c, "a.txt", "a"), writeTool(c, "b.txt", "b"))
		}
		return text(doneText)
	},
	"long": long,
	"huge_usage": func(conversation) reply {
		r := text("This short answer reports an enormous usage.")
		r.outputTokens = HugeOutputTokens
		return r
	},
}

// HugeOutputTokens is the output_tokens the "huge_usage" scenario reports.
const HugeOutputTokens = 5_000_000

// long streams longWords words, one per delta, slowly.
func long(conversation) reply {
	var b strings.Builder
	for i := range longWords {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(longSentence[i%len(longSentence)])
	}
	return reply{blocks: []replyBlock{{text: b.String()}}, slow: true}
}

// LongPrompt makes "auto" answer as "long" does, so that one server can stream a long answer to one
// conversation and script the others.
const LongPrompt = "tell me a long story"

// longWords is how many words (one delta each) the "long" scenario streams.
const longWords = 200

var longSentence = strings.Fields("this long scripted answer streams one word at a time so that tests can interrupt it midway")

// Scenarios lists the scenario names, sorted.
func Scenarios() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var (
	createRe = regexp.MustCompile(`(?is)^create\s+(\S+)\s+containing\s+(.*)$`)
	runRe    = regexp.MustCompile(`(?is)^run\s+(.+)$`)
	callRe   = regexp.MustCompile(`(?is)^call\s+([A-Za-z0-9_-]{1,128})(?:\s+(\{.*\}))?$`)
)

// auto reads the prompt: "create <path> containing <text>" writes a file, "run <command>" runs a command,
// "call <tool> [<JSON object>]" calls any tool by name (an MCP tool such as mcp__srv__echo) with that
// input, LongPrompt streams the "long" answer, anything else is echoed back.
func auto(c conversation) reply {
	if c.step > 0 {
		return text(doneText)
	}
	prompt := strings.TrimSpace(c.prompt)
	if m := createRe.FindStringSubmatch(prompt); m != nil {
		return toolUse(writeTool(c, unquote(m[1]), unquote(strings.TrimSpace(m[2]))))
	}
	if m := runRe.FindStringSubmatch(prompt); m != nil {
		cmd := strings.TrimSpace(m[1])
		return toolUse(bashTool(cmd, "Run the requested command"))
	}
	if m := callRe.FindStringSubmatch(prompt); m != nil {
		input := map[string]any{}
		if m[2] != "" && json.Unmarshal([]byte(m[2]), &input) != nil {
			return text("You said: " + prompt)
		}
		return toolUse(replyBlock{name: m[1], input: input})
	}
	if strings.EqualFold(prompt, LongPrompt) {
		return long(c)
	}
	return text("You said: " + prompt)
}

// unquote strips one pair of matching quotes around s.
func unquote(s string) string {
	if len(s) >= 2 {
		if q := s[0]; (q == '"' || q == '\'' || q == '`') && s[len(s)-1] == q {
			return s[1 : len(s)-1]
		}
	}
	return s
}

// sideText answers requests outside the agent loop.
const sideText = "OK."
