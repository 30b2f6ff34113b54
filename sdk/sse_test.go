package warren

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// The SDK reads events through internal/sse (whose tests and fuzz target cover the parsing rules): its
// reader names an untyped event "message", keeps ids, and turns an event over its bound into
// errSSETooLarge.
func TestSSEReader(t *testing.T) {
	r := newSSEReader(strings.NewReader("id: 7\ndata: a\n\nevent: exit\ndata: {}\n\n"))
	for _, want := range []sseEvent{{Event: "message", Data: "a", ID: "7"}, {Event: "exit", Data: "{}", ID: "7"}} {
		if got, err := r.Next(); err != nil || got != want {
			t.Fatalf("Next() = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("at end: %v", err)
	}
	big := newSSEReader(strings.NewReader("data: " + strings.Repeat("x", maxSSEEvent) + "\n\n"))
	if _, err := big.Next(); !errors.Is(err, errSSETooLarge) {
		t.Fatalf("over the bound: %v, want errSSETooLarge", err)
	}
}
