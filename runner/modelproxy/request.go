package modelproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// Bounds on what an agent may ask for.
const (
	// DefaultMaxTokens is set in the forwarded body of a request without max_tokens, so the worst case the
	// proxy reserved for is the bound the model works under.
	DefaultMaxTokens = 32_000
	// maxMaxTokens refuses absurd max_tokens before they overflow the worst-case arithmetic; models
	// answer at most 128k tokens today.
	maxMaxTokens = 1 << 20
	// minThinkingBudget is the API's smallest thinking.budget_tokens.
	minThinkingBudget = 1024
)

// span is a byte range [start, end) of a request body.
type span struct{ start, end int }

// messagesRequest is what the proxy reads of a Messages API body: the top-level keys, and the fields that
// price and bound the call or that the policy judges. Keys are compared exactly, as the API does
// (encoding/json's case-insensitive field matching would let "MAX_TOKENS" mean one thing here and another
// upstream).
type messagesRequest struct {
	body      []byte
	open      int // offset just after the object's '{'
	empty     bool
	model     string
	maxTokens int64 // -1 when absent
	maxSpan   span
	// thinking is the raw "thinking" value and its span; nil when absent.
	thinking     json.RawMessage
	thinkingSpan span
	// toolTypes are the "type"s of the tools offered, in order, "" for a tool without one (a plain client
	// tool). Server tools (web_search_*, code_execution_*, ...) carry a type.
	toolTypes []string
	// gated are the top-level keys present that change what a call may do or cost beyond its tokens
	// (gatedKeys), in body order.
	gated []string
	// keys are the top-level keys in body order (each once: a repeated key is refused) and fields their
	// values' spans.
	keys   []string
	fields map[string]span
	// serviceTier is the "service_tier" value; "" when absent.
	serviceTier string
	// urlSource is true when a content block anywhere in the body has a "source" of "type" "url": an image
	// or document the API fetches itself, whose tokens its bytes do not bound.
	urlSource bool
}

// gatedKeys are top-level request fields the proxy refuses (policy.go), with why: each makes the API reach
// out on the caller's behalf or bills beyond the tokens Warren prices. Config.AllowFields cannot enable them.
var gatedKeys = []string{"mcp_servers", "speed", "inference_geo", "container"}

// parseMessagesRequest scans an untrusted request body. It fails when the body is not one JSON object,
// when a top-level key appears more than once (the proxy and the API could otherwise read different
// values), when model or service_tier is not a string, when max_tokens is not an integer in [0, 2^20], or
// when tools is not an array of objects each with at most one "type", a string.
func parseMessagesRequest(body []byte) (*messagesRequest, error) {
	r := &messagesRequest{body: body, maxTokens: -1, fields: map[string]span{}}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("body is not a JSON object")
	}
	r.open = int(dec.InputOffset())
	r.empty = true
	for dec.More() {
		r.empty = false
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("read key: %w", err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("read %q: %w", key, err)
		}
		end := int(dec.InputOffset())
		sp := span{end - len(raw), end}
		if _, ok := r.fields[key]; ok {
			return nil, fmt.Errorf("%q appears more than once", key)
		}
		if sp.start < 0 || !bytes.Equal(body[sp.start:sp.end], raw) {
			return nil, fmt.Errorf("locate %q", key) // cannot happen with encoding/json; refuse rather than misedit
		}
		r.keys, r.fields[key] = append(r.keys, key), sp
		switch key {
		case "model":
			if err := json.Unmarshal(raw, &r.model); err != nil {
				return nil, errors.New("model is not a string")
			}
		case "max_tokens":
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n < 0 || n > maxMaxTokens {
				return nil, fmt.Errorf("max_tokens must be an integer from 0 to %d", maxMaxTokens)
			}
			r.maxTokens, r.maxSpan = n, sp
		case "thinking":
			r.thinking, r.thinkingSpan = raw, sp
		case "tools":
			if r.toolTypes, err = toolTypes(raw); err != nil {
				return nil, err
			}
		case "service_tier":
			if err := json.Unmarshal(raw, &r.serviceTier); err != nil {
				return nil, errors.New("service_tier is not a string")
			}
		default:
			if slices.Contains(gatedKeys, key) {
				r.gated = append(r.gated, key)
			}
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("body is not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	if r.urlSource, err = hasURLSource(body); err != nil {
		return nil, err
	}
	return r, nil
}

// hasURLSource reads the whole body as exact JSON (a name repeated in any object, or invalid UTF-8, is
// refused: the proxy and the API could read different values) and reports whether any object's "source"
// member is an object whose "type" is "url". Such a block (an image or a PDF given by URL) is fetched by the
// API: a few dozen bytes can become many thousands of input tokens, which breaks the proxy's bound of one
// token per byte (and its count_tokens fallback does not see what the fetch will return).
func hasURLSource(body []byte) (bool, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	found := false
	var walk func(source bool) error
	walk = func(source bool) error {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		switch tok.Kind() {
		case '{':
			for dec.PeekKind() != '}' {
				name, err := dec.ReadToken()
				if err != nil {
					return err
				}
				k := name.String()
				if source && k == "type" && dec.PeekKind() == '"' {
					v, err := dec.ReadToken()
					if err != nil {
						return err
					}
					found = found || v.String() == "url"
					continue
				}
				if err := walk(k == "source"); err != nil {
					return err
				}
			}
		case '[':
			for dec.PeekKind() != ']' {
				if err := walk(false); err != nil {
					return err
				}
			}
		default:
			return nil
		}
		_, err = dec.ReadToken() // the closing '}' or ']'
		return err
	}
	if err := walk(false); err != nil {
		var se *jsontext.SyntacticError
		if errors.As(err, &se) {
			return false, fmt.Errorf("body at %.128q: %w", string(se.JSONPointer), se.Err) // the pointer is the tenant's text: clipped
		}
		return false, fmt.Errorf("read body: %w", err)
	}
	return found, nil
}

// toolTypes reads the "type" of every entry of a tools array ("" when absent). Keys are matched exactly
// and a repeated "type" is refused, as above.
func toolTypes(raw json.RawMessage) ([]string, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, errors.New("tools is not an array")
	}
	var types []string
	for i := 0; dec.More(); i++ {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return nil, fmt.Errorf("tools[%d] is not an object", i)
		}
		typ, seen := "", false
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("tools[%d]: %w", i, err)
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("tools[%d]: %w", i, err)
			}
			if key != "type" {
				continue
			}
			if seen {
				return nil, fmt.Errorf("tools[%d].type appears more than once", i)
			}
			seen = true
			if err := json.Unmarshal(v, &typ); err != nil {
				return nil, fmt.Errorf("tools[%d].type is not a string", i)
			}
		}
		if _, err := dec.Token(); err != nil { // the object's '}'
			return nil, fmt.Errorf("tools[%d]: %w", i, err)
		}
		types = append(types, typ)
	}
	return types, nil
}

// thinkingBudget is thinking.budget_tokens of an extended-thinking request ("type":"enabled"), else 0.
// Keys are matched exactly, as everywhere in this file.
func (r *messagesRequest) thinkingBudget() int64 {
	if r.thinking == nil {
		return 0
	}
	var t map[string]json.RawMessage
	if json.Unmarshal(r.thinking, &t) != nil {
		return 0
	}
	var typ string
	var budget int64
	if json.Unmarshal(t["type"], &typ) != nil || typ != "enabled" || json.Unmarshal(t["budget_tokens"], &budget) != nil {
		return 0
	}
	return budget
}

// withLimits returns the body to forward: max_tokens set to maxTokens (inserted when absent) and, when
// thinkingBudget > 0, thinking.budget_tokens set to it. The rest of the body is kept byte for byte.
func (r *messagesRequest) withLimits(maxTokens, thinkingBudget int64) ([]byte, error) {
	type edit struct {
		at   span
		text []byte
	}
	var edits []edit
	num := strconv.AppendInt(nil, maxTokens, 10)
	switch {
	case r.maxTokens >= 0 && r.maxTokens == maxTokens:
	case r.maxTokens >= 0:
		edits = append(edits, edit{r.maxSpan, num})
	case r.empty:
		edits = append(edits, edit{span{r.open, r.open}, append([]byte(`"max_tokens":`), num...)})
	default:
		edits = append(edits, edit{span{r.open, r.open}, append(append([]byte(`"max_tokens":`), num...), ',')})
	}
	if thinkingBudget > 0 {
		var t map[string]json.RawMessage
		if err := json.Unmarshal(r.thinking, &t); err != nil {
			return nil, fmt.Errorf("rewrite thinking: %w", err)
		}
		t["budget_tokens"] = json.RawMessage(strconv.AppendInt(nil, thinkingBudget, 10))
		var text bytes.Buffer
		enc := json.NewEncoder(&text)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(t); err != nil {
			return nil, fmt.Errorf("rewrite thinking: %w", err)
		}
		edits = append(edits, edit{r.thinkingSpan, bytes.TrimSuffix(text.Bytes(), []byte("\n"))})
	}
	if len(edits) == 0 {
		return r.body, nil
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].at.start < edits[j].at.start })
	out := make([]byte, 0, len(r.body)+32)
	prev := 0
	for _, e := range edits {
		out = append(out, r.body[prev:e.at.start]...)
		out = append(out, e.text...)
		prev = e.at.end
	}
	return append(out, r.body[prev:]...), nil
}

// countFields are the top-level fields a count_tokens request takes that make up a call's input. The
// others (max_tokens, stream, metadata, context_management, safeguards, ...) are left out of the count and
// bounded by their bytes instead (inputBound).
var countFields = []string{"model", "system", "messages", "tools", "tool_choice", "thinking"}

// countBody is the count_tokens body for the request: its countFields, their values byte for byte.
func (r *messagesRequest) countBody() []byte {
	out := []byte{'{'}
	for _, k := range countFields {
		sp, ok := r.fields[k]
		if !ok {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, k)
		out = append(out, ':')
		out = append(out, r.body[sp.start:sp.end]...)
	}
	return append(out, '}')
}
