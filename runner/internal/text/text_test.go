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
