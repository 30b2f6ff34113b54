package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestStreamFrameRoundTrip(t *testing.T) {
	msgs := [][]byte{[]byte(`{"type":"ping"}`), bytes.Repeat([]byte("a"), 70<<10), []byte("x")}
	var b []byte
	for _, m := range msgs {
		b = AppendStreamFrame(b, m)
	}
	r := bytes.NewReader(b)
	for i, want := range msgs {
		got, err := ReadStreamFrame(r, 1<<20)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %d bytes, %v; want %d bytes", i, len(got), err, len(want))
		}
	}
	if _, err := ReadStreamFrame(r, 1<<20); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestStreamFrameRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		in   []byte
		want error
	}{
		"empty":             {[]byte{0, 0, 0, 0}, ErrEmptyFrame},
		"over the limit":    {[]byte{0, 0, 0, 11, 'a'}, ErrFrameTooLarge},
		"huge length":       {[]byte{0xff, 0xff, 0xff, 0xff}, ErrFrameTooLarge},
		"cut in the body":   {[]byte{0, 0, 0, 5, 'a', 'b'}, io.ErrUnexpectedEOF},
		"cut in the length": {[]byte{0, 0}, io.ErrUnexpectedEOF},
	} {
		if _, err := ReadStreamFrame(bytes.NewReader(tc.in), 10); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// FuzzStreamFrame: any bytes read as frames either give messages within the limit that re-encode to the
// same bytes, or an error; nothing panics and nothing above the limit is returned.
func FuzzStreamFrame(f *testing.F) {
	f.Add(AppendStreamFrame(nil, []byte(`{"type":"init","payload":{}}`)), 64)
	f.Add([]byte{0, 0, 0, 0}, 8)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, 1<<20)
	f.Add(append(AppendStreamFrame(nil, []byte("ab")), 0, 0, 0, 9, 'x'), 16)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 1 || max > 1<<16 {
			max = 1 << 16
		}
		r := bytes.NewReader(in)
		var again []byte
		for {
			msg, err := ReadStreamFrame(r, max)
			if err != nil {
				if err == io.EOF && !bytes.Equal(again, in) {
					t.Fatalf("clean end but the frames re-encode to %x, not %x", again, in)
				}
				return
			}
			if len(msg) == 0 || len(msg) > max {
				t.Fatalf("message of %d bytes with limit %d", len(msg), max)
			}
			again = AppendStreamFrame(again, msg)
		}
	})
}
