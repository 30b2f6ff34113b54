package roles

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// Logs are JSON lines unless they go to a terminal, where they are text for a person.
func TestLoggerFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", "v")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["msg"] != "hello" {
		t.Fatalf("not JSON off a terminal: %q %v", buf.String(), err)
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	log, err = newLogger(tty, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", "v")
	line := make([]byte, 512)
	n, err := ptmx.Read(line)
	if err != nil || !strings.Contains(string(line[:n]), "msg=hello k=v") {
		t.Fatalf("not text on a terminal: %q %v", line[:n], err)
	}
	if isTerminal(&buf) {
		t.Fatal("a buffer is no terminal")
	}
}
