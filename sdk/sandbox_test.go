package warren

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// sandboxServer serves handler and returns a client for it; every request must carry the token.
func sandboxServer(t *testing.T, handler http.HandlerFunc) *Sandbox {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer tok" {
			t.Errorf("%s %s: Authorization = %q", r.Method, r.URL, got)
		}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/", "tok")
	if err != nil {
		t.Fatal(err)
	}
	return c.Sandbox()
}

func route(t *testing.T, r *http.Request, method, path string) {
	t.Helper()
	if r.Method != method || r.URL.Path != path {
		t.Errorf("request %s %s, want %s %s", r.Method, r.URL.Path, method, path)
	}
}

func writeSSE(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	w.(http.Flusher).Flush()
}

func TestExec(t *testing.T) {
	req := ExecRequest{Command: "ls", Args: []string{"-la"}, Cwd: "src", Env: map[string]string{"A": "1"}, Stdin: "in", TimeoutMs: 500}
	sb := sandboxServer(t, func(w http.ResponseWriter, r *http.Request) {
		route(t, r, "POST", "/v1/sandbox/exec")
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Accept") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		var got ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil || !reflect.DeepEqual(got, req) {
			t.Errorf("body %+v, %v", got, err)
		}
		json.NewEncoder(w).Encode(ExecResult{Stdout: "out", Stderr: "err", ExitCode: 3, DurationMs: 7})
	})
	res, err := sb.Exec(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if *res != (ExecResult{Stdout: "out", Stderr: "err", ExitCode: 3, DurationMs: 7}) {
		t.Fatalf("result %+v", res)
	}
}

func TestExecStream(t *testing.T) {
	firstSeen := make(chan struct{})
	sb := sandboxServer(t, func(w http.ResponseWriter, r *http.Request) {
		route(t, r, "POST", "/v1/sandbox/exec")
		if r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		writeSSE(w, "stdout", wire.ExecChunk{Data: "one\n"})
		// The client must have the first chunk before the command goes on: output is streamed, not buffered.
		select {
		case <-firstSeen:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, ": keep-alive\r\n\r\n")
		writeSSE(w, "stderr", wire.ExecChunk{Data: "warn\n"})
		writeSSE(w, "progress", map[string]int{"n": 1})
		writeSSE(w, "stdout", wire.ExecChunk{Data: "two\n"})
		writeSSE(w, "exit", ExecResult{ExitCode: 2, DurationMs: 9})
	})
	var got []string
	var res *ExecResult
	for ev, err := range sb.ExecStream(context.Background(), ExecRequest{Command: "x"}) {
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			close(firstSeen)
		}
		got = append(got, ev.Kind+":"+ev.Data)
		res = ev.Result
	}
	if want := []string{"stdout:one\n", "stderr:warn\n", "stdout:two\n", "exit:"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if res == nil || res.ExitCode != 2 || res.DurationMs != 9 {
		t.Fatalf("result %+v", res)
	}
}

func TestExecStreamFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		check   func(error) bool
	}{
		{"http error", func(w http.ResponseWriter, r *http.Request) {
			wire.WriteHTTPError(w, nil, wire.Errorf(wire.BudgetExceeded, "no compute left"))
		}, func(err error) bool { return IsCode(err, CodeBudgetExceeded) }},
		{"error event", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeSSE(w, "stdout", wire.ExecChunk{Data: "partial"})
			writeSSE(w, "error", wire.Errorf(wire.Timeout, "command ran too long"))
		}, func(err error) bool {
			var we *Error
			return errors.As(err, &we) && we.Code == CodeTimeout && we.Message == "command ran too long"
		}},
		{"cut short", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeSSE(w, "stdout", wire.ExecChunk{Data: "partial"})
		}, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"malformed chunk", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: stdout\ndata: not json\n\n")
		}, func(err error) bool { return err != nil && strings.Contains(err.Error(), "malformed stdout event") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := sandboxServer(t, tt.handler)
			var errs []error
			for _, err := range sb.ExecStream(context.Background(), ExecRequest{Command: "x"}) {
				if err != nil {
					errs = append(errs, err)
				}
			}
			if len(errs) != 1 || !tt.check(errs[0]) {
				t.Fatalf("errors %v", errs)
			}
		})
	}
}

func TestExecStreamJSONFallback(t *testing.T) {
	sb := sandboxServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(ExecResult{Stdout: "o", Stderr: "e", ExitCode: 1})
	})
	var got []string
	for ev, err := range sb.ExecStream(context.Background(), ExecRequest{Command: "x"}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Kind+":"+ev.Data)
		if ev.Kind == ExecExit && (ev.Result.ExitCode != 1 || ev.Result.Stdout != "") {
			t.Fatalf("exit result %+v", ev.Result)
		}
	}
	if want := []string{"stdout:o", "stderr:e", "exit:"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events %q", got)
	}
}

// TestExecStreamStop checks that leaving the loop early ends the request, which is what stops the command.
func TestExecStreamStop(t *testing.T) {
	gone := make(chan struct{})
	sb := sandboxServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeSSE(w, "stdout", wire.ExecChunk{Data: "tick"})
		<-r.Context().Done()
		close(gone)
	})
	for ev, err := range sb.ExecStream(context.Background(), ExecRequest{Command: "yes"}) {
		if err != nil || ev.Data != "tick" {
			t.Fatalf("%+v, %v", ev, err)
		}
		break
	}
	<-gone
}

func TestFiles(t *testing.T) {
	const path = "dir/a b&c=d%.txt"
	type put struct {
		body          string
		contentLength int64
		chunked       bool
	}
	puts := make(chan put, 10)
	deletes := make(chan string, 10)
	sb := sandboxServer(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("path") != path && q.Get("path") != "missing" {
			t.Errorf("path = %q", q.Get("path"))
		}
		switch {
		case r.URL.Path == "/v1/sandbox/files" && q.Get("path") == "missing":
			wire.WriteHTTPError(w, nil, wire.Errorf(wire.NotFound, "missing: no such file"))
		case r.Method == "GET" && r.URL.Path == "/v1/sandbox/files":
			w.Header().Set("Content-Type", "application/octet-stream")
			fmt.Fprint(w, "contents\x00\xff")
		case r.Method == "PUT" && r.URL.Path == "/v1/sandbox/files":
			b, _ := io.ReadAll(r.Body)
			puts <- put{string(b), r.ContentLength, len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"}
			json.NewEncoder(w).Encode(FileWritten{Path: path, Size: int64(len(b))})
		case r.Method == "GET" && r.URL.Path == "/v1/sandbox/files/list":
			json.NewEncoder(w).Encode(wire.FileList{Path: path, Entries: []FileInfo{
				{Name: "x", Path: "dir/x", Type: "file", Size: 3, Mode: "0644", ModTime: "2025-01-02T03:04:05Z"}}})
		case r.Method == "DELETE" && r.URL.Path == "/v1/sandbox/files":
			deletes <- r.URL.RawQuery
			w.WriteHeader(http.StatusNoContent)
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			http.NotFound(w, r)
		}
	})
	ctx := context.Background()

	b, err := sb.ReadFile(ctx, path)
	if err != nil || string(b) != "contents\x00\xff" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	rc, err := sb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(rc)
	rc.Close()
	if string(b) != "contents\x00\xff" {
		t.Fatalf("Open read %q", b)
	}
	if _, err := sb.ReadFile(ctx, "missing"); !IsCode(err, CodeNotFound) {
		t.Fatalf("ReadFile(missing) = %v", err)
	}

	local := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(local, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(local)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(4, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("piped "))
		pw.Write([]byte("data"))
		pw.Close()
	}()
	for _, tt := range []struct {
		name string
		r    io.Reader
		want put
	}{
		{"bytes", bytes.NewReader([]byte("hello")), put{"hello", 5, false}},
		{"string", strings.NewReader("hey"), put{"hey", 3, false}},
		{"file from offset", f, put{"456789", 6, false}},
		{"pipe", pr, put{"piped data", -1, true}},
		{"empty", strings.NewReader(""), put{"", 0, false}},
		{"nil", nil, put{"", 0, false}},
	} {
		fw, err := sb.WriteFile(ctx, path, tt.r)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := <-puts; got != tt.want || fw.Size != int64(len(tt.want.body)) || fw.Path != path {
			t.Fatalf("%s: server got %+v (answer %+v), want %+v", tt.name, got, fw, tt.want)
		}
	}
	if _, err := f.Stat(); err != nil {
		t.Fatalf("WriteFile closed the caller's file: %v", err)
	}

	entries, err := sb.List(ctx, path)
	if err != nil || len(entries) != 1 || entries[0].Name != "x" || entries[0].Size != 3 {
		t.Fatalf("List = %+v, %v", entries, err)
	}

	for _, tt := range []struct {
		recursive bool
		query     string
	}{
		{false, "path=dir%2Fa+b%26c%3Dd%25.txt"},
		{true, "path=dir%2Fa+b%26c%3Dd%25.txt&recursive=true"},
	} {
		if err := sb.Remove(ctx, path, tt.recursive); err != nil {
			t.Fatalf("Remove(recursive=%v): %v", tt.recursive, err)
		}
		if got := <-deletes; got != tt.query {
			t.Fatalf("Remove(recursive=%v) query %q, want %q", tt.recursive, got, tt.query)
		}
	}
}

func TestNew(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"https://w.example.com/prefix/", "https://w.example.com/prefix"},
		{"ws://h:1/?x=1", "http://h:1"},
	} {
		c, err := New(tt.in, "t")
		if err != nil || c.URL() != tt.want {
			t.Errorf("New(%q) = %v, %v; want %s", tt.in, c.URL(), err, tt.want)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://h", "http://"} {
		if _, err := New(bad, "t"); err == nil {
			t.Errorf("New(%q) succeeded", bad)
		}
	}
	c, _ := New("https://w.example.com/prefix", "t")
	if got := c.endpoint("/v1/sandbox/files", pathQuery("a b/ü&x=y")); got != "https://w.example.com/prefix/v1/sandbox/files?path=a+b%2F%C3%BC%26x%3Dy" {
		t.Errorf("endpoint = %s", got)
	}
}
