package wire

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
)

// FuzzDecodeFileMove: whatever a client sends as a move request, the decoder answers both paths or a typed
// error, and never panics.
func FuzzDecodeFileMove(f *testing.F) {
	for _, s := range []string{
		`{"from":"a","to":"b"}`, `{"from":"a/b","to":"../x","overwrite":true,"parents":true}`,
		`{"from":"","to":"b"}`, `{"from":"a","to":"b","extra":1}`, `{"from":"a"} {}`, `[]`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeFileMove(bytes.NewReader(b))
		if err == nil {
			if m.From == "" || m.To == "" || len(b) > MaxFileMoveBody {
				t.Fatalf("accepted %+v from %q", m, b)
			}
			return
		}
		if c := CodeOf(err); c != InvalidArgument && c != PayloadTooLarge {
			t.Fatalf("error code %s: %v", c, err)
		}
	})
}

// FuzzParseWatchQuery: any query string parses to a bounded debounce window or a typed error.
func FuzzParseWatchQuery(f *testing.F) {
	for _, s := range []string{"", "path=a&recursive=false&debounceMs=100", "debounceMs=9", "debounceMs=5001",
		"recursive=maybe", "debounceMs=-1", "debounceMs=1e3", "path=%00&debounceMs=10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		w, err := ParseWatchQuery(q)
		if err != nil {
			if CodeOf(err) != InvalidArgument {
				t.Fatalf("error code %s: %v", CodeOf(err), err)
			}
			return
		}
		if w.Debounce < MinWatchDebounce || w.Debounce > MaxWatchDebounce || w.Path != q.Get("path") {
			t.Fatalf("parsed %+v from %q", w, s)
		}
	})
}

func TestDecodeFileMove(t *testing.T) {
	m, err := DecodeFileMove(strings.NewReader(`{"from":"a","to":"b/c","overwrite":true}`))
	if err != nil || m != (FileMoveRequest{From: "a", To: "b/c", Overwrite: true}) {
		t.Fatalf("got %+v, %v", m, err)
	}
	for _, bad := range []string{`{"from":"a"}`, `{"from":"a","to":"b","x":1}`, `nope`, `{"from":"a","to":"b"}{}`} {
		if _, err := DecodeFileMove(strings.NewReader(bad)); CodeOf(err) != InvalidArgument {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := DecodeFileMove(strings.NewReader(`{"from":"` + strings.Repeat("a", MaxFileMoveBody) + `"}`)); CodeOf(err) != PayloadTooLarge {
		t.Errorf("oversized: %v", err)
	}
}

func TestParseWatchQuery(t *testing.T) {
	w, err := ParseWatchQuery(url.Values{})
	if err != nil || w != (WatchQuery{Recursive: true, Debounce: DefaultWatchDebounce}) {
		t.Fatalf("defaults %+v, %v", w, err)
	}
	w, err = ParseWatchQuery(url.Values{"path": {"src"}, "recursive": {"false"}, "debounceMs": {"250"}})
	if err != nil || w.Path != "src" || w.Recursive || w.Debounce.Milliseconds() != 250 {
		t.Fatalf("got %+v, %v", w, err)
	}
	for _, bad := range []url.Values{{"debounceMs": {"9"}}, {"debounceMs": {"x"}}, {"recursive": {"2"}}} {
		if _, err := ParseWatchQuery(bad); CodeOf(err) != InvalidArgument {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
