package httpx

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestStatusWriter(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
	}{
		{"nothing", func(http.ResponseWriter) {}, 200},
		{"switching", func(w http.ResponseWriter) { w.WriteHeader(101) }, 101},
		{"body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200},
		{"status", func(w http.ResponseWriter) { w.WriteHeader(404) }, 404},
		{"first final status", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(201); w.WriteHeader(500) }, 201},
		{"status after body", func(w http.ResponseWriter) { _, _ = w.Write(nil); w.WriteHeader(500) }, 200},
	} {
		sw := NewStatusWriter(httptest.NewRecorder())
		c.write(sw)
		if sw.Status() != c.want {
			t.Errorf("%s: Status() = %d, want %d", c.name, sw.Status(), c.want)
		}
	}
	var w http.ResponseWriter = NewStatusWriter(httptest.NewRecorder())
	if _, ok := w.(http.Flusher); !ok {
		t.Error("a StatusWriter is a Flusher")
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		t.Errorf("flush through Unwrap: %v", err)
	}
}

func TestWriteJSON(t *testing.T) {
	w := httptest.NewRecorder()
	if err := WriteJSON(w, http.StatusCreated, map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	h := w.Header()
	if w.Code != 201 || w.Body.String() != "{\"n\":1}\n" || h.Get("Content-Type") != "application/json" ||
		h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("%d %q %v", w.Code, w.Body, h)
	}
}

// TestEvents reads a stream through a real server, so the flush of each event is what the client sees
// before the handler ends.
func TestEvents(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := StartEvents(w)
		_ = e.Send("one", map[string]int{"n": 1})
		<-next                       // the client reads "one" while the handler still runs: it was flushed
		_ = e.Send("two", func() {}) // not JSON: an internal error is sent instead
		_ = e.Ping()
	}))
	defer srv.Close()
	defer close(next)
	req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("headers %v", resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	read := func() string {
		var sb strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("read: %v after %q", err, sb.String())
			}
			if line == "\n" {
				return sb.String()
			}
			sb.WriteString(line)
		}
	}
	if got := read(); got != "event: one\ndata: {\"n\":1}\n" {
		t.Fatalf("first event %q", got)
	}
	next <- struct{}{}
	if got := read(); got != "event: two\ndata: {\"code\":\"internal\",\"message\":\"internal error\"}\n" {
		t.Fatalf("second event %q", got)
	}
	if got := read(); got != ": keep-alive\n" {
		t.Fatalf("ping %q", got)
	}
}
