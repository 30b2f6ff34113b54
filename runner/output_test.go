package runner

import (
	"testing"
)

func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{max: 5}
	for _, s := range []string{"ab", "c\xc3\xa9", "zz"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "abcé" || !b.truncated {
		t.Fatalf("String = %q, truncated %v", got, b.truncated)
	}
	b = &cappedBuffer{max: 4}
	_, _ = b.Write([]byte("abc\xc3\xa9"))
	if got := b.String(); got != "abc" {
		t.Fatalf("a character cut by the cap must be dropped, got %q", got)
	}
}

func TestTruncateUTF8(t *testing.T) {
	if got := truncateUTF8("aé", 2); got != "a" {
		t.Fatalf("got %q", got)
	}
	if got := truncateUTF8("aé", 3); got != "aé" {
		t.Fatalf("got %q", got)
	}
}
