package warren

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// parseSSE reads r through the SDK's reader (internal/sse has the parser's own tests and fuzz target).
func parseSSE(tb testing.TB, r io.Reader) ([]sseEvent, error) {
	tb.Helper()
	p := newSSEReader(r)
	var evs []sseEvent
	for {
		ev, err := p.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestSSE(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []sseEvent
	}{
		{"empty", "", nil},
		{"one", "event: stdout\ndata: {\"data\":\"hi\"}\n\n", []sseEvent{{Event: "stdout", Data: `{"data":"hi"}`}}},
		{"default type", "data: x\n\n", []sseEvent{{Event: "message", Data: "x"}}},
		{"multi-line data", "data: a\ndata: b\ndata:\n\n", []sseEvent{{Event: "message", Data: "a\nb\n"}}},
		{"one space stripped", "data:  two\ndata:none\n\n", []sseEvent{{Event: "message", Data: " two\nnone"}}},
		{"crlf", "event: exit\r\ndata: 1\r\n\r\n", []sseEvent{{Event: "exit", Data: "1"}}},
		{"cr", "event: exit\rdata: 1\r\r", []sseEvent{{Event: "exit", Data: "1"}}},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n", []sseEvent{{Event: "message", Data: "a\nb\nc"}}},
		{"comments", ": keep-alive\n\n:x\nevent: e\n: mid\ndata: d\n\n", []sseEvent{{Event: "e", Data: "d"}}},
		{"no data no dispatch", "event: e\n\ndata: d\n\n", []sseEvent{{Event: "message", Data: "d"}}},
		{"field without colon", "data\n\n", []sseEvent{{Event: "message", Data: ""}}},
		{"unknown and retry ignored", "retry: 10\nfoo: bar\ndata: d\n\n", []sseEvent{{Event: "message", Data: "d"}}},
		{"id persists", "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n", []sseEvent{
			{Event: "message", Data: "a", ID: "7"}, {Event: "message", Data: "b", ID: "7"}, {Event: "message", Data: "c"}}},
		{"id with NUL ignored", "id: 1\ndata: a\n\nid: x\x00y\ndata: b\n\n", []sseEvent{
			{Event: "message", Data: "a", ID: "1"}, {Event: "message", Data: "b", ID: "1"}}},
		{"bom", "\uFEFFdata: a\n\n", []sseEvent{{Event: "message", Data: "a"}}},
		{"truncated event discarded", "data: a\n\ndata: b\n", []sseEvent{{Event: "message", Data: "a"}}},
		{"unterminated line discarded", "data: a\n\ndata: b", []sseEvent{{Event: "message", Data: "a"}}},
		{"colon in value", "data: a: b\n\n", []sseEvent{{Event: "message", Data: "a: b"}}},
		{"event resets", "event: a\ndata: 1\n\ndata: 2\n\n", []sseEvent{{Event: "a", Data: "1"}, {Event: "message", Data: "2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in))} {
				got, err := parseSSE(t, r)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
			}
		})
	}
}

// An event over the bound is errSSETooLarge, the SDK's error.
func TestSSELimit(t *testing.T) {
	in := "data: " + strings.Repeat("x", maxSSEEvent) + "\n\n"
	if _, err := parseSSE(t, strings.NewReader(in)); !errors.Is(err, errSSETooLarge) {
		t.Errorf("err = %v, want errSSETooLarge", err)
	}
}

// TestSSEIncremental checks that an event is returned as soon as its empty line arrives, without waiting for
// more input, even when the stream uses lone CR line endings.
func TestSSEIncremental(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	p := newSSEReader(pr)
	go func() {
		for _, chunk := range []string{"event: stdout\r", "data: 1\r", "\r", "data: 2\r\n", "\r\n"} {
			if _, err := pw.Write([]byte(chunk)); err != nil {
				return
			}
		}
	}()
	for _, want := range []sseEvent{{Event: "stdout", Data: "1"}, {Event: "message", Data: "2"}} {
		got, err := p.Next()
		if err != nil || got != want {
			t.Fatalf("Next() = %q, %v; want %q", got, err, want)
		}
	}
	pw.Close()
	if _, err := p.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("at end: %v", err)
	}
}
