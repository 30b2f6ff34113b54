package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// The file API reaches a user held in region a through region b's edge: mkdir, stat and move answer,
// a watch streams live through both edges and the mesh (a command run through b writes a file, the
// watch sees it), and escapes come back as typed errors.
func TestForwardFiles(t *testing.T) {
	rn := realRunner(t)
	_, b, _ := twoRegions(t, rn, live)
	ctx := testCtx(t)
	call := caller(t, ctx, b.url)
	want := func(resp *http.Response, status int, v any) {
		t.Helper()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != status {
			t.Fatalf("%s %s through b: %d %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, body)
		}
		if v != nil {
			if err := json.Unmarshal(body, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	var fi wire.FileInfo
	want(call("POST", "/v1/sandbox/files/mkdir?path=w/sub&parents=true", ""), http.StatusCreated, &fi)
	if fi.Path != "w/sub" || fi.Type != "dir" {
		t.Fatalf("mkdir %+v", fi)
	}
	watch := call("GET", "/v1/sandbox/files/watch?path=w&debounceMs=10", "", "Accept", "text/event-stream")
	if watch.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("watch through b: %d %v", watch.StatusCode, watch.Header)
	}
	event := rawEvents(t, watch.Body)
	if ev := event(); !strings.HasPrefix(ev, "event: ready\n") || !strings.Contains(ev, `"path":"w"`) {
		t.Fatalf("first event %q", ev)
	}
	var res wire.ExecResult
	want(call("POST", "/v1/sandbox/exec", `{"command":"echo hi > w/sub/f.txt"}`), http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Fatalf("exec through b: %+v", res)
	}
	for {
		ev := event()
		if strings.Contains(ev, `"path":"w/sub/f.txt"`) {
			if !strings.HasPrefix(ev, "event: change\n") || !strings.Contains(ev, `"create"`) {
				t.Fatalf("change event %q", ev)
			}
			break
		}
	}
	want(call("POST", "/v1/sandbox/files/move", `{"from":"w/sub/f.txt","to":"w/g.txt"}`), http.StatusOK, &fi)
	if fi.Path != "w/g.txt" || fi.Size != 3 {
		t.Fatalf("move %+v", fi)
	}
	want(call("GET", "/v1/sandbox/files/stat?path=w/g.txt", ""), http.StatusOK, &fi)
	if fi.Type != "file" {
		t.Fatalf("stat %+v", fi)
	}
	var we wire.Error
	want(call("GET", "/v1/sandbox/files/stat?path=../x", ""), http.StatusForbidden, &we)
	if we.Code != wire.PermissionDenied {
		t.Fatalf("escape through b: %+v", we)
	}
}

// caller sends requests as alice to the edge at base; responses are closed when the test ends.
func caller(t *testing.T, ctx context.Context, base string) func(method, path, body string, hdr ...string) *http.Response {
	return func(method, path, body string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
}

// rawEvents returns a reader of the server-sent events of body, each as its raw lines joined;
// keep-alive comments are skipped.
func rawEvents(t *testing.T, body io.Reader) func() string {
	br := bufio.NewReader(body)
	return func() string {
		t.Helper()
		var ev []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event stream after %q: %v", ev, err)
			}
			if line == "\n" {
				if len(ev) > 0 && strings.HasPrefix(ev[0], ":") {
					ev = nil
					continue
				}
				return strings.Join(ev, "")
			}
			ev = append(ev, line)
		}
	}
}
