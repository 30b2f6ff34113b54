package modelserver

import (
	"context"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// stream writes one Messages API answer as server-sent events.
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	delay time.Duration
	sent  int
}

func newStream(w http.ResponseWriter, delay time.Duration) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), delay: delay}
}

// event writes one SSE event and flushes it, waiting s.delay first for every event but the first.
func (s *stream) event(ctx context.Context, name string, data any) error {
	if s.sent > 0 && s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("stream %s: %w", name, ctx.Err())
		case <-t.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	s.sent++
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, marshalCompact(data)); err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flush %s: %w", name, err)
	}
	return nil
}

// start writes the headers, message_start, a ping and the start of the first block with one delta: what
// a Drop fault sends before cutting the connection.
func (s *stream) start(ctx context.Context, m apiMessage) error {
	s.header()
	if err := s.messageStart(ctx, m); err != nil {
		return err
	}
	if len(m.Content) == 0 {
		return nil
	}
	if err := s.event(ctx, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": blockStart(m.Content[0])}); err != nil {
		return err
	}
	chunks := blockChunks(m, 0, false)
	if len(chunks) == 0 {
		return nil
	}
	return s.event(ctx, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": chunks[0]})
}

func (s *stream) header() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
}

func (s *stream) messageStart(ctx context.Context, m apiMessage) error {
	start := m
	start.Content = []contentOut{}
	start.StopReason = ""
	start.Usage.OutputTokens = 1
	if err := s.event(ctx, "message_start", map[string]any{"type": "message_start", "message": messageStartJSON(start)}); err != nil {
		return err
	}
	return s.event(ctx, "ping", map[string]string{"type": "ping"})
}

// messageStartJSON is the message of message_start: stop_reason is null until message_delta.
func messageStartJSON(m apiMessage) map[string]any {
	return map[string]any{
		"id": m.ID, "type": m.Type, "role": m.Role, "model": m.Model, "content": m.Content,
		"stop_reason": nil, "stop_sequence": nil, "usage": m.Usage,
	}
}

// send streams the whole message. fine streams text one word per delta, with a ping every 20 deltas.
func (s *stream) send(ctx context.Context, m apiMessage, fine bool) error {
	s.header()
	if err := s.messageStart(ctx, m); err != nil {
		return err
	}
	for i, c := range m.Content {
		if err := s.event(ctx, "content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": blockStart(c)}); err != nil {
			return err
		}
		for j, d := range blockChunks(m, i, fine) {
			if j > 0 && j%20 == 0 {
				if err := s.event(ctx, "ping", map[string]string{"type": "ping"}); err != nil {
					return err
				}
			}
			if err := s.event(ctx, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}); err != nil {
				return err
			}
		}
		if err := s.event(ctx, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i}); err != nil {
			return err
		}
	}
	if err := s.event(ctx, "message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": m.StopReason, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": m.Usage.OutputTokens},
	}); err != nil {
		return err
	}
	return s.event(ctx, "message_stop", map[string]string{"type": "message_stop"})
}

// blockStart is a content block as content_block_start announces it: empty text, or a tool_use with an
// empty input that input_json_delta events fill.
func blockStart(c contentOut) map[string]any {
	if c.Type == "tool_use" {
		return map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}
	}
	return map[string]any{"type": "text", "text": ""}
}

// blockChunks is the deltas of content block i: text_delta pieces of a few words (one word when fine), or
// input_json_delta pieces of the tool input's JSON.
func blockChunks(m apiMessage, i int, fine bool) []map[string]string {
	c := m.Content[i]
	if c.Type == "tool_use" {
		var out []map[string]string
		for _, p := range splitRunes(string(m.inputJSON[i]), 24) {
			out = append(out, map[string]string{"type": "input_json_delta", "partial_json": p})
		}
		return out
	}
	words := 3
	if fine {
		words = 1
	}
	var out []map[string]string
	for _, p := range splitWords(*c.Text, words) {
		out = append(out, map[string]string{"type": "text_delta", "text": p})
	}
	return out
}

// splitWords cuts s after every n-th space; concatenating the pieces gives s back.
func splitWords(s string, n int) []string {
	var out []string
	count, from := 0, 0
	for i, r := range s {
		if r == ' ' {
			count++
			if count == n {
				out = append(out, s[from:i+1])
				from, count = i+1, 0
			}
		}
	}
	if from < len(s) {
		out = append(out, s[from:])
	}
	return out
}

// splitRunes cuts s into pieces of about n bytes without splitting a UTF-8 sequence.
func splitRunes(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			_, cut = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
