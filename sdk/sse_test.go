package warren

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func parseSSE(tb testing.TB, r io.Reader, max int) ([]sseEvent, error) {
	tb.Helper()
	p := newSSEReader(r)
	if max > 0 {
		p.max = max
	}
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
				got, err := parseSSE(t, r, 0)
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

func TestSSELimit(t *testing.T) {
	for _, in := range []string{"data: 0123456789\n\n", "data: 01234\ndata: 56789\n\n"} {
		if _, err := parseSSE(t, strings.NewReader(in), 10); !errors.Is(err, errSSETooLarge) {
			t.Errorf("%q: err = %v, want errSSETooLarge", in, err)
		}
	}
	if _, err := parseSSE(t, strings.NewReader("data: 012\n\n"), 10); err != nil {
		t.Errorf("small event: %v", err)
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

// encodeSSE writes one event the way a server should; data's line breaks become separate data lines.
func encodeSSE(event, data string) string {
	var b strings.Builder
	if event != "" {
		b.WriteString("event: " + event + "\n")
	}
	for _, l := range splitLines(data) {
		b.WriteString("data: " + l + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

func splitLines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Split(s, "\n")
}

func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"", "data: x\n\n", "event: stdout\r\ndata: {\"data\":\"a\"}\r\n\r\n", ": c\rdata\r\r", "\uFEFFid: 1\ndata:\n\n",
		"data: a\ndata: b\n", "event:\n\n", "data: \r\n\n", "\r\r\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 1 << 10
		whole, errWhole := parseSSE(t, bytes.NewReader(in), max)
		bytewise, errBytewise := parseSSE(t, iotest.OneByteReader(bytes.NewReader(in)), max)
		if !reflect.DeepEqual(whole, bytewise) || !errors.Is(errBytewise, errWhole) {
			t.Fatalf("whole %q, %v; byte by byte %q, %v", whole, errWhole, bytewise, errBytewise)
		}
		if errWhole != nil && !errors.Is(errWhole, errSSETooLarge) {
			t.Fatalf("unexpected error %v", errWhole)
		}
		if !bytes.ContainsRune(in, '\r') {
			for _, eol := range []string{"\r\n", "\r"} {
				alt := bytes.ReplaceAll(in, []byte("\n"), []byte(eol))
				got, err := parseSSE(t, bytes.NewReader(alt), max)
				if !reflect.DeepEqual(got, whole) || !errors.Is(err, errWhole) {
					t.Fatalf("with %q line ends: %q, %v; with LF: %q, %v", eol, got, err, whole, errWhole)
				}
			}
		}

		// Round trip: whatever the text, encoding it as an event and parsing it gives it back.
		name := strings.Map(func(r rune) rune {
			if r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, string(in))
		wantName := name
		if name == "" {
			wantName = "message"
		}
		data := string(in)
		got, err := parseSSE(t, strings.NewReader(encodeSSE(name, data)), 0)
		want := []sseEvent{{Event: wantName, Data: strings.Join(splitLines(data), "\n")}}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip of %q: %q, %v; want %q", in, got, err, want)
		}
	})
}
