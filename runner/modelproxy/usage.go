package modelproxy

import (
	"bytes"
	"encoding/json"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/sse"
)

// maxEventBytes bounds one SSE event (or line) the usage tap keeps while parsing. Larger events still
// pass through to the agent untouched; the tap just does not read them. Usage events are a few hundred
// bytes.
const maxEventBytes = 1 << 20

// maxJSONBytes bounds the non-streaming answer the tap keeps to read its usage. Answers are bounded by
// max_tokens (a few MB at most); a larger one passes through unread and is charged as granted.
const maxJSONBytes = 32 << 20

// apiUsage is the usage object of message_start.message, message_delta and a non-streaming message.
// Fields the API leaves out or sends as null decode as zero.
type apiUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

// usageTap reads the usage of a Messages API answer from the bytes the proxy forwards, without holding
// them up: Write never fails and never blocks on anything but parsing.
//
// Counts are cumulative in the API (message_delta repeats the running total), so every field keeps the
// largest value seen: a count can only grow, and a late event that omits a field does not erase it.
type usageTap struct {
	stream bool

	events sse.Parser // the stream's events (internal/sse), oversized ones skipped

	// JSON state
	body     bytes.Buffer
	bodyOver bool

	usage    billing.TokenUsage
	started  bool  // message_start (or a non-streaming message with usage) was read
	final    bool  // message_delta (or a non-streaming message with usage) was read
	deltas   int64 // content deltas that carried something: each is at least one output token
	errEvent bool  // the stream carried an error event
}

func newUsageTap(stream bool) *usageTap {
	return &usageTap{stream: stream, events: sse.Parser{Max: maxEventBytes, SkipOversize: true}}
}

// Write consumes the next bytes of the answer.
func (t *usageTap) Write(p []byte) (int, error) {
	n := len(p)
	if !t.stream {
		if !t.bodyOver {
			if t.body.Len()+len(p) > maxJSONBytes {
				t.bodyOver = true
				t.body = bytes.Buffer{}
			} else {
				t.body.Write(p)
			}
		}
		return n, nil
	}
	_ = t.events.Feed(p, t.dispatch) // with SkipOversize it never fails
	return n, nil
}

// dispatch handles one complete event. The event name decides, as in the API's SDKs; an event without a
// name falls back to the type in its data.
func (t *usageTap) dispatch(ev sse.Event) {
	name := ev.Type
	if name == "" {
		var v struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(ev.Data, &v) != nil {
			return
		}
		name = v.Type
	}
	switch name {
	case "message_start":
		var v struct {
			Message struct {
				Usage *apiUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(ev.Data, &v) == nil && v.Message.Usage != nil {
			t.merge(*v.Message.Usage)
			t.started = true
		}
	case "message_delta":
		var v struct {
			Usage *apiUsage `json:"usage"`
		}
		if json.Unmarshal(ev.Data, &v) == nil && v.Usage != nil {
			t.merge(*v.Usage)
			t.final = true
		}
	case "content_block_delta":
		var v struct {
			Delta struct {
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				PartialJSON string `json:"partial_json"`
				Citation    any    `json:"citation"`
			} `json:"delta"`
		}
		if json.Unmarshal(ev.Data, &v) == nil &&
			(v.Delta.Text != "" || v.Delta.Thinking != "" || v.Delta.PartialJSON != "" || v.Delta.Citation != nil) {
			t.deltas++
		}
	case "error":
		t.errEvent = true
	}
}

// maxTokenCount caps a reported count so that no price can overflow the cost arithmetic.
const maxTokenCount = 1 << 40

func (t *usageTap) merge(u apiUsage) {
	u.InputTokens, u.OutputTokens = min(u.InputTokens, maxTokenCount), min(u.OutputTokens, maxTokenCount)
	u.CacheReadInputTokens = min(u.CacheReadInputTokens, maxTokenCount)
	u.CacheCreationInputTokens = min(u.CacheCreationInputTokens, maxTokenCount)
	t.usage.InputTokens = max(t.usage.InputTokens, u.InputTokens)
	t.usage.OutputTokens = max(t.usage.OutputTokens, u.OutputTokens)
	t.usage.CacheReadInputTokens = max(t.usage.CacheReadInputTokens, u.CacheReadInputTokens)
	t.usage.CacheCreationInputTokens = max(t.usage.CacheCreationInputTokens, u.CacheCreationInputTokens)
}

// finish is called once the answer has ended, cleanly or not; a non-streaming answer is read now.
func (t *usageTap) finish() {
	if t.stream {
		// A last event without its blank line is incomplete and, per the SSE rules, discarded.
		return
	}
	if t.bodyOver {
		return
	}
	var v struct {
		Usage *apiUsage `json:"usage"`
	}
	if json.Unmarshal(t.body.Bytes(), &v) == nil && v.Usage != nil {
		t.merge(*v.Usage)
		t.started, t.final = true, true
	}
	t.body = bytes.Buffer{}
}

// observed is the usage the answer showed. A stream cut before message_delta reports its final output
// count nowhere; the content deltas that did arrive are a lower bound on it (each carries at least one
// token), so the proxy charges that rather than nothing.
func (t *usageTap) observed() billing.TokenUsage {
	u := t.usage
	if t.stream && !t.final {
		u.OutputTokens = max(u.OutputTokens, t.deltas)
	}
	return u
}
