package sse

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// ev is an Event with its data as a string, for comparisons.
type ev struct{ Type, Data, ID string }

func read(tb testing.TB, r io.Reader, max int) ([]ev, error) {
	tb.Helper()
	rd := NewReader(r, max)
	var evs []ev
	for {
		e, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return evs, err
		}
		evs = append(evs, ev{e.Type, string(e.Data), e.ID})
	}
}

// feed parses in with Feed, cut into chunks of size n (the whole input when n is 0).
func feed(in []byte, n int, p *Parser) ([]ev, error) {
	var evs []ev
	emit := func(e Event) { evs = append(evs, ev{e.Type, string(e.Data), e.ID}) }
	if n == 0 {
		n = len(in) + 1
	}
	for len(in) > 0 {
		k := min(n, len(in))
		if err := p.Feed(in[:k], emit); err != nil {
			return evs, err
		}
		in = in[k:]
	}
	return evs, nil
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []ev
	}{
		{"empty", "", nil},
		{"one", "event: stdout\ndata: {\"data\":\"hi\"}\n\n", []ev{{Type: "stdout", Data: `{"data":"hi"}`}}},
		{"no type", "data: x\n\n", []ev{{Data: "x"}}},
		{"multi-line data", "data: a\ndata: b\ndata:\n\n", []ev{{Data: "a\nb\n"}}},
		{"one space stripped", "data:  two\ndata:none\n\n", []ev{{Data: " two\nnone"}}},
		{"crlf", "event: exit\r\ndata: 1\r\n\r\n", []ev{{Type: "exit", Data: "1"}}},
		{"cr", "event: exit\rdata: 1\r\r", []ev{{Type: "exit", Data: "1"}}},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n", []ev{{Data: "a\nb\nc"}}},
		{"comments", ": keep-alive\n\n:x\nevent: e\n: mid\ndata: d\n\n", []ev{{Type: "e", Data: "d"}}},
		{"no data no dispatch", "event: e\n\ndata: d\n\n", []ev{{Data: "d"}}},
		{"field without colon", "data\n\n", []ev{{Data: ""}}},
		{"unknown and retry ignored", "retry: 10\nfoo: bar\ndata: d\n\n", []ev{{Data: "d"}}},
		{"id persists", "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n", []ev{{Data: "a", ID: "7"}, {Data: "b", ID: "7"}, {Data: "c"}}},
		{"id with NUL ignored", "id: 1\ndata: a\n\nid: x\x00y\ndata: b\n\n", []ev{{Data: "a", ID: "1"}, {Data: "b", ID: "1"}}},
		{"bom", "\uFEFFdata: a\n\n", []ev{{Data: "a"}}},
		{"bom only first", "data: a\n\n\uFEFFdata: b\n\n", []ev{{Data: "a"}}},
		{"truncated event discarded", "data: a\n\ndata: b\n", []ev{{Data: "a"}}},
		{"unterminated line discarded", "data: a\n\ndata: b", []ev{{Data: "a"}}},
		{"colon in value", "data: a: b\n\n", []ev{{Data: "a: b"}}},
		{"event resets", "event: a\ndata: 1\n\ndata: 2\n\n", []ev{{Type: "a", Data: "1"}, {Data: "2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in))} {
				got, err := read(t, r, 0)
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("Reader: %q, %v; want %q", got, err, tt.want)
				}
			}
			for _, n := range []int{0, 1, 2, 3, 7} {
				got, err := feed([]byte(tt.in), n, &Parser{})
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("Feed in chunks of %d: %q, %v; want %q", n, got, err, tt.want)
				}
			}
		})
	}
}

func TestLimit(t *testing.T) {
	for _, in := range []string{"data: 0123456789\n\n", "data: 01234\ndata: 56789\n\n"} {
		if _, err := read(t, strings.NewReader(in), 10); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%q: err = %v, want ErrTooLarge", in, err)
		}
		if _, err := feed([]byte(in), 3, &Parser{Max: 10}); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Feed %q: err = %v, want ErrTooLarge", in, err)
		}
	}
	if _, err := read(t, strings.NewReader("data: 012\n\n"), 10); err != nil {
		t.Errorf("small event: %v", err)
	}
	// With SkipOversize the event that outgrew the bound is dropped, and the stream reads on.
	in := "data: 0123456789\n\ndata: 01234\ndata: 56789\n\nevent: x\ndata: ok\n\n"
	for _, n := range []int{0, 1, 4} {
		got, err := feed([]byte(in), n, &Parser{Max: 10, SkipOversize: true})
		if err != nil || !reflect.DeepEqual(got, []ev{{Type: "x", Data: "ok"}}) {
			t.Errorf("SkipOversize, chunks of %d: %q, %v", n, got, err)
		}
	}
}

// An event is returned as soon as its empty line arrives, without waiting for more input, even with lone
// CR line endings.
func TestReaderIsIncremental(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	rd := NewReader(pr, 0)
	go func() {
		for _, chunk := range []string{"event: stdout\r", "data: 1\r", "\r", "data: 2\r\n", "\r\n"} {
			if _, err := pw.Write([]byte(chunk)); err != nil {
				return
			}
		}
	}()
	for _, want := range []ev{{Type: "stdout", Data: "1"}, {Data: "2"}} {
		got, err := rd.Next()
		if err != nil || (ev{got.Type, string(got.Data), got.ID}) != want {
			t.Fatalf("Next() = %q, %v; want %q", got, err, want)
		}
	}
	pw.Close()
	if _, err := rd.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("at end: %v", err)
	}
}

// encode writes one event the way a server should; data's line breaks become separate data lines.
func encode(event, data string) string {
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

// FuzzParse: the stream is hostile (a server, or the model API through the proxy). Whatever it holds,
// the Reader and Feed in any chunking agree, errors are only ErrTooLarge, the three line ends read the
// same, SkipOversize never fails, and any text encoded as an event reads back as itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "data: x\n\n", "event: stdout\r\ndata: {\"data\":\"a\"}\r\n\r\n", ": c\rdata\r\r", "\uFEFFid: 1\ndata:\n\n",
		"data: a\ndata: b\n", "event:\n\n", "data: \r\n\n", "\r\r\n\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		const max = 1 << 10
		whole, errWhole := read(t, bytes.NewReader(in), max)
		bytewise, errBytewise := read(t, iotest.OneByteReader(bytes.NewReader(in)), max)
		if !reflect.DeepEqual(whole, bytewise) || !errors.Is(errBytewise, errWhole) {
			t.Fatalf("whole %q, %v; byte by byte %q, %v", whole, errWhole, bytewise, errBytewise)
		}
		if errWhole != nil && !errors.Is(errWhole, ErrTooLarge) {
			t.Fatalf("unexpected error %v", errWhole)
		}
		fed, errFed := feed(in, int(chunk), &Parser{Max: max})
		if !reflect.DeepEqual(fed, whole) || !errors.Is(errFed, errWhole) {
			t.Fatalf("Feed in chunks of %d: %q, %v; Reader: %q, %v", chunk, fed, errFed, whole, errWhole)
		}
		if skipped, err := feed(in, int(chunk), &Parser{Max: max, SkipOversize: true}); err != nil ||
			(errWhole == nil && !reflect.DeepEqual(skipped, whole)) {
			t.Fatalf("SkipOversize: %q, %v; want %q", skipped, err, whole)
		}
		if !bytes.ContainsRune(in, '\r') {
			for _, eol := range []string{"\r\n", "\r"} {
				alt := bytes.ReplaceAll(in, []byte("\n"), []byte(eol))
				got, err := read(t, bytes.NewReader(alt), max)
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
		data := string(in)
		got, err := read(t, strings.NewReader(encode(name, data)), 0)
		want := []ev{{Type: name, Data: strings.Join(splitLines(data), "\n")}}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip of %q: %q, %v; want %q", in, got, err, want)
		}
	})
}
