package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// A transfer shows a progress bar only when stderr is a terminal, and passes every byte on either way.
func TestProgressOnlyOnATerminal(t *testing.T) {
	data := strings.Repeat("x", 1<<20)
	var errb bytes.Buffer
	src := strings.NewReader(data)
	r, done := progress(&errb, src, int64(len(data)), "put f")
	if r != io.Reader(src) {
		t.Fatal("off a terminal the reader was wrapped")
	}
	done()
	if errb.Len() != 0 {
		t.Fatalf("off a terminal: %q on stderr", errb.String())
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	shown := make(chan string, 1)
	go func() {
		var seen strings.Builder
		buf := make([]byte, 4096)
		for !strings.Contains(seen.String(), "put f") {
			n, err := ptmx.Read(buf)
			if err != nil {
				break
			}
			seen.Write(buf[:n])
		}
		shown <- seen.String()
	}()
	r, done = progress(tty, strings.NewReader(data), int64(len(data)), "put f")
	got, err := io.ReadAll(r)
	done()
	tty.Close() // the reader above stops at the end of what was written
	if err != nil || string(got) != data {
		t.Fatalf("through the bar: %d bytes, %v", len(got), err)
	}
	if s := <-shown; !strings.Contains(s, "put f") {
		t.Fatalf("no bar on the terminal: %q", s)
	}
}
