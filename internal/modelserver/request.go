package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// messagesBody is the part of a Messages API request the server reads. Everything else is ignored.
type messagesBody struct {
	Model     string            `json:"model"`
	Stream    bool              `json:"stream"`
	MaxTokens int               `json:"max_tokens"`
	Messages  []json.RawMessage `json:"messages"`
	System    json.RawMessage   `json:"system"`
	Tools     []json.RawMessage `json:"tools"`
}

// parseBody decodes an untrusted request body. It fails only when the body is not a JSON object or a field
// the server reads has the wrong type, as the real API would.
func parseBody(data []byte) (messagesBody, error) {
	var b messagesBody
	if err := json.Unmarshal(data, &b); err != nil {
		return messagesBody{}, fmt.Errorf("decode request body: %w", err)
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return messagesBody{}, fmt.Errorf("decode request body: not an object")
	}
	return b, nil
}

// toolNames lists the name of every tool offered; tools without a string name are skipped.
func (b messagesBody) toolNames() []string {
	var names []string
	for _, t := range b.Tools {
		var tool struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(t, &tool) == nil && tool.Name != "" {
			names = append(names, tool.Name)
		}
	}
	return names
}

// message is one entry of "messages". Role "system" entries are tolerated and skipped.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// block is a content block; only the fields the scenarios read.
type block struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	ID        string `json:"id"`
	ToolUseID string `json:"tool_use_id"`
}

// contentBlocks reads content given as a string or as an array of blocks; malformed blocks are skipped.
func contentBlocks(raw json.RawMessage) []block {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) != nil {
		return nil
	}
	out := make([]block, 0, len(arr))
	for _, r := range arr {
		var b block
		if json.Unmarshal(r, &b) == nil {
			out = append(out, b)
		}
	}
	return out
}

// conversation is what a scenario needs to know about a request.
type conversation struct {
	// prompt is the user's own text in the last user message: text blocks that are not
	// <system-reminder> injections, joined by newlines.
	prompt string
	// step counts the scripted assistant turns already answered: one more than the highest step of our
	// tool_use ids answered by tool_result blocks in the last user message, or 0 for a fresh prompt.
	step int
	// cwd is the working directory the CLI reports in its environment information ("" if absent).
	cwd string
}

const systemReminder = "<system-reminder>"

var cwdPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?m)Primary working directory: *(\S[^\n]*)`),
	regexp.MustCompile(`(?m)^\s*Working directory: *(\S[^\n]*)`),
}

func readConversation(b messagesBody) conversation {
	var c conversation
	var msgs []message
	for _, raw := range b.Messages {
		var m message
		if json.Unmarshal(raw, &m) == nil && m.Role != "system" {
			msgs = append(msgs, m)
		}
	}
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			last = i
			break
		}
	}
	if last >= 0 {
		var texts []string
		for _, bl := range contentBlocks(msgs[last].Content) {
			switch bl.Type {
			case "text":
				t := strings.TrimSpace(bl.Text)
				if t != "" && !strings.HasPrefix(t, systemReminder) {
					texts = append(texts, t)
				}
			case "tool_result":
				if n, ok := parseToolID(bl.ToolUseID); ok && n+1 > c.step {
					c.step = n + 1
				}
			}
		}
		c.prompt = strings.Join(texts, "\n")
	}
	for _, bl := range contentBlocks(b.System) {
		if c.cwd == "" && bl.Type == "text" {
			c.cwd = findCWD(bl.Text)
		}
	}
	for i := 0; c.cwd == "" && i < len(msgs); i++ {
		if msgs[i].Role != "user" {
			continue
		}
		for _, bl := range contentBlocks(msgs[i].Content) {
			if bl.Type == "text" {
				if c.cwd = findCWD(bl.Text); c.cwd != "" {
					break
				}
			}
		}
	}
	return c
}

// findCWD looks for the working directory the CLI reports in its environment information.
func findCWD(text string) string {
	for _, re := range cwdPatterns {
		if m := re.FindStringSubmatch(text); m != nil {
			return strings.TrimSpace(m[1])
		}
	}
	return ""
}

// Tool use ids carry the scenario step that produced them, so the next request can tell where the script
// is without server state: toolu_warren_s<step>_b<index>_<nonce>.
const toolIDPrefix = "toolu_warren_s"

func toolID(step, index int, nonce string) string {
	return fmt.Sprintf("%s%d_b%d_%s", toolIDPrefix, step, index, nonce)
}

func parseToolID(id string) (step int, ok bool) {
	rest, found := strings.CutPrefix(id, toolIDPrefix)
	if !found {
		return 0, false
	}
	num, _, found := strings.Cut(rest, "_")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n > 1000 {
		return 0, false
	}
	return n, true
}
