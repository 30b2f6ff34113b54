package modelproxy

import (
	"strings"
	"testing"

	"github.com/warren-mesh/warren/billing"
)

const sampleStream = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}` + "\n\n" +
	"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}` + "\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func tapAll(stream bool, chunks ...string) *usageTap {
	t := newUsageTap(stream)
	for _, c := range chunks {
		_, _ = t.Write([]byte(c))
	}
	t.finish()
	return t
}

func TestUsageTap(t *testing.T) {
	full := billing.TokenUsage{InputTokens: 472, OutputTokens: 15, CacheReadInputTokens: 2000, CacheCreationInputTokens: 100}
	cut := sampleStream[:strings.Index(sampleStream, "event: content_block_stop")]
	tests := []struct {
		name   string
		tap    *usageTap
		want   billing.TokenUsage
		final  bool
		errEvt bool
	}{
		{"whole", tapAll(true, sampleStream), full, true, false},
		{"byte by byte", tapAll(true, strings.Split(sampleStream, "")...), full, true, false},
		{"CRLF", tapAll(true, strings.ReplaceAll(sampleStream, "\n", "\r\n")), full, true, false},
		{"CR split from LF", tapAll(true, strings.ReplaceAll(sampleStream, "\n", "\r\n")[:40], strings.ReplaceAll(sampleStream, "\n", "\r\n")[40:]), full, true, false},
		{"CR only", tapAll(true, strings.ReplaceAll(sampleStream, "\n", "\r")), full, true, false},
		{"no event names", tapAll(true, strings.NewReplacer("event: message_start\n", "", "event: message_delta\n", "").Replace(sampleStream)), full, true, false},
		{"cut after two deltas: deltas bound output", tapAll(true, cut),
			billing.TokenUsage{InputTokens: 472, OutputTokens: 2, CacheReadInputTokens: 2000, CacheCreationInputTokens: 100}, false, false},
		{"cut mid event", tapAll(true, sampleStream[:strings.Index(sampleStream, `"output_tokens":15`)]),
			billing.TokenUsage{InputTokens: 472, OutputTokens: 2, CacheReadInputTokens: 2000, CacheCreationInputTokens: 100}, false, false},
		{"delta carries input fields", tapAll(true, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":null,\"output_tokens\":40}}\n\n"),
			billing.TokenUsage{InputTokens: 12, OutputTokens: 40}, true, false},
		{"error event", tapAll(true, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"),
			billing.TokenUsage{}, false, true},
		{"json", tapAll(false, `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],`, `"usage":{"input_tokens":9,"output_tokens":3,"cache_read_input_tokens":1,"cache_creation_input_tokens":2}}`),
			billing.TokenUsage{InputTokens: 9, OutputTokens: 3, CacheReadInputTokens: 1, CacheCreationInputTokens: 2}, true, false},
		{"json without usage", tapAll(false, `{"id":"msg_1"}`), billing.TokenUsage{}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tap.observed(); got != tc.want {
				t.Errorf("observed %+v, want %+v", got, tc.want)
			}
			if tc.tap.final != tc.final || tc.tap.errEvent != tc.errEvt {
				t.Errorf("final %v error %v, want %v %v", tc.tap.final, tc.tap.errEvent, tc.final, tc.errEvt)
			}
		})
	}
}

func TestUsageTapSkipsOversizedEvents(t *testing.T) {
	big := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
		strings.Repeat("x", maxEventBytes) + "\"}}\n\n"
	tap := tapAll(true, big, sampleStream)
	if got := tap.observed(); got.InputTokens != 472 || got.OutputTokens != 15 {
		t.Errorf("after an oversized event: %+v", got)
	}
}

// FuzzUsageTap: the tap never panics, and how the stream is cut into reads never changes what it reads.
func FuzzUsageTap(f *testing.F) {
	f.Add([]byte(sampleStream), uint16(7))
	f.Add([]byte(strings.ReplaceAll(sampleStream, "\n", "\r\n")), uint16(1))
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\r\r"), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, step uint16) {
		whole := tapAll(true, string(data))
		n := int(step%64) + 1
		var parts []string
		for i := 0; i < len(data); i += n {
			parts = append(parts, string(data[i:min(i+n, len(data))]))
		}
		split := tapAll(true, parts...)
		if whole.observed() != split.observed() || whole.final != split.final || whole.started != split.started {
			t.Fatalf("whole %+v, in %d-byte reads %+v", whole.observed(), n, split.observed())
		}
		u := whole.observed()
		if u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadInputTokens < 0 || u.CacheCreationInputTokens < 0 ||
			u.InputTokens > maxTokenCount || u.OutputTokens > max(maxTokenCount, whole.deltas) {
			t.Fatalf("out of range usage %+v", u)
		}
		_ = tapAll(false, string(data)).observed()
	})
}
