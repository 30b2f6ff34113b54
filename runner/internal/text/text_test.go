package text

import (
	"strings"
	"testing"
)

func TestUTF8Stream(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []string // text returned per chunk, then by flush
	}{
		{"ascii", []string{"ab", "c"}, []string{"ab", "c", ""}},
		{"split two-byte", []string{"h\xc3", "\xa9!"}, []string{"h", "é!", ""}},
		{"split four-byte thrice", []string{"\xf0", "\x9f\x98", "\x80"}, []string{"", "", "😀", ""}},
		{"invalid byte replaced", []string{"a\xffb"}, []string{"a\uFFFDb", ""}},
		{"dangling at end", []string{"x\xe2\x82"}, []string{"x", "\uFFFD"}},
		{"invalid lead then valid", []string{"\xc3", "A"}, []string{"", "\uFFFDA", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u Stream
			var got []string
			for _, c := range tt.chunks {
				got = append(got, u.Next([]byte(c)))
			}
			got = append(got, u.Flush())
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCappedBuffer(t *testing.T) {
	b := &Capped{Max: 5}
	for _, s := range []string{"ab", "c\xc3\xa9", "zz"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "abcé" || !b.Truncated() {
		t.Fatalf("String = %q, truncated %v", got, b.Truncated())
	}
	b = &Capped{Max: 4}
	_, _ = b.Write([]byte("abc\xc3\xa9"))
	if got := b.String(); got != "abc" {
		t.Fatalf("a character cut by the cap must be dropped, got %q", got)
	}
}

func TestTruncateUTF8(t *testing.T) {
	if got := Truncate("aé", 2); got != "a" {
		t.Fatalf("got %q", got)
	}
	if got := Truncate("aé", 3); got != "aé" {
		t.Fatalf("got %q", got)
	}
}
