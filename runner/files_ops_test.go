package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

func fileRoute(route, p string, extra ...string) string {
	q := url.Values{"path": {p}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return "/v1/sandbox/files/" + route + "?" + q.Encode()
}

func (h *harness) move(t *testing.T, m wire.FileMoveRequest) *http.Response {
	t.Helper()
	return h.doJSON(t, http.MethodPost, "/v1/sandbox/files/move", m)
}

// Stat, mkdir (with and without parents), move and recursive delete, and their typed refusals.
func TestFilesStatMkdirMove(t *testing.T) {
	h := startRunner(t)
	var fi wire.FileInfo
	decode(t, h.do(t, http.MethodPost, fileRoute("mkdir", "a/b/c", "parents", "true"), nil), http.StatusCreated, &fi)
	if fi.Path != "a/b/c" || fi.Name != "c" || fi.Type != "dir" {
		t.Fatalf("mkdir -p = %+v", fi)
	}
	decode(t, h.do(t, http.MethodPost, fileRoute("mkdir", "a/b/c", "parents", "true"), nil), http.StatusOK, &fi)
	wantError(t, h.do(t, http.MethodPost, fileRoute("mkdir", "a/b/c"), nil), wire.Conflict)
	wantError(t, h.do(t, http.MethodPost, fileRoute("mkdir", "x/y"), nil), wire.NotFound)
	decode(t, h.do(t, http.MethodPost, fileRoute("mkdir", "x"), nil), http.StatusCreated, &fi)
	decode(t, h.do(t, http.MethodPut, filesPath("a/f.txt"), strings.NewReader("hello")), http.StatusCreated, nil)
	wantError(t, h.do(t, http.MethodPost, fileRoute("mkdir", "a/f.txt", "parents", "true"), nil), wire.Conflict)
	wantError(t, h.do(t, http.MethodPost, fileRoute("mkdir", "a/f.txt/sub", "parents", "true"), nil), wire.NotFound)
	wantError(t, h.do(t, http.MethodPost, fileRoute("mkdir", "q", "parents", "perhaps"), nil), wire.InvalidArgument)

	decode(t, h.do(t, http.MethodGet, fileRoute("stat", "a/f.txt"), nil), http.StatusOK, &fi)
	if fi.Path != "a/f.txt" || fi.Name != "f.txt" || fi.Type != "file" || fi.Size != 5 || fi.ModTime == "" {
		t.Fatalf("stat file = %+v", fi)
	}
	decode(t, h.do(t, http.MethodGet, fileRoute("stat", ""), nil), http.StatusOK, &fi)
	if fi.Path != "." || fi.Type != "dir" {
		t.Fatalf("stat root = %+v", fi)
	}
	if err := os.Symlink("f.txt", filepath.Join(h.ws, "a", "link")); err != nil {
		t.Fatal(err)
	}
	decode(t, h.do(t, http.MethodGet, fileRoute("stat", "a/link"), nil), http.StatusOK, &fi)
	if fi.Type != "symlink" {
		t.Fatalf("stat symlink = %+v", fi)
	}
	wantError(t, h.do(t, http.MethodGet, fileRoute("stat", "nope"), nil), wire.NotFound)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/files/stat", nil), wire.InvalidArgument)

	// Rename a file, then a directory with what it holds; the sandbox sees the result.
	decode(t, h.move(t, wire.FileMoveRequest{From: "a/f.txt", To: "a/g.txt"}), http.StatusOK, &fi)
	if fi.Path != "a/g.txt" || fi.Size != 5 {
		t.Fatalf("move = %+v", fi)
	}
	decode(t, h.move(t, wire.FileMoveRequest{From: "a", To: "new/home/a2", Parents: true}), http.StatusOK, &fi)
	if fi.Type != "dir" {
		t.Fatalf("move dir = %+v", fi)
	}
	if res := h.exec(t, wire.ExecRequest{Command: "cat new/home/a2/g.txt; test -d new/home/a2/b/c && test ! -e a && echo ok"}); res.Stdout != "hellook\n" {
		t.Fatalf("sandbox sees %q", res.Stdout)
	}
	decode(t, h.do(t, http.MethodPut, filesPath("other.txt"), strings.NewReader("other")), http.StatusCreated, nil)
	wantError(t, h.move(t, wire.FileMoveRequest{From: "other.txt", To: "new/home/a2/g.txt"}), wire.Conflict)
	decode(t, h.move(t, wire.FileMoveRequest{From: "other.txt", To: "new/home/a2/g.txt", Overwrite: true}), http.StatusOK, &fi)
	if fi.Size != 5 {
		t.Fatalf("overwrite = %+v", fi)
	}
	wantError(t, h.move(t, wire.FileMoveRequest{From: "new/home/a2/g.txt", To: "new/home/a2/b", Overwrite: true}), wire.Conflict)
	wantError(t, h.move(t, wire.FileMoveRequest{From: "new/home/a2/b", To: "new/home/a2/g.txt", Overwrite: true}), wire.Conflict)
	wantError(t, h.move(t, wire.FileMoveRequest{From: "new", To: "new/home/inside"}), wire.InvalidArgument)
	wantError(t, h.move(t, wire.FileMoveRequest{From: ".", To: "elsewhere"}), wire.PermissionDenied)
	wantError(t, h.move(t, wire.FileMoveRequest{From: "x", To: ""}), wire.InvalidArgument)
	wantError(t, h.move(t, wire.FileMoveRequest{From: "nope", To: "x2"}), wire.NotFound)
	wantError(t, h.move(t, wire.FileMoveRequest{From: "x", To: "missing/x"}), wire.NotFound)
	wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/files/move", strings.NewReader(`{"from":"x","to":"y","mode":1}`)), wire.InvalidArgument)

	// Recursive delete of a tree.
	wantError(t, h.do(t, http.MethodDelete, filesPath("new"), nil), wire.Conflict)
	if resp := h.do(t, http.MethodDelete, filesPath("new", "recursive", "true"), nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("recursive delete: %d", resp.StatusCode)
	}
	wantError(t, h.do(t, http.MethodGet, fileRoute("stat", "new"), nil), wire.NotFound)
	m := metrics(t, h)
	for _, op := range []string{"stat", "mkdir", "move"} {
		if !strings.Contains(m, `warren_runner_file_ops_total{op="`+op+`",result="ok"}`) {
			t.Errorf("no ok count for %s in metrics", op)
		}
	}
}

func metrics(t *testing.T, h *harness) string {
	t.Helper()
	resp := h.do(t, http.MethodGet, "/metrics", nil)
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Reads are streamed and honour a Range, so a large download can resume where it stopped.
func TestFilesRangeRead(t *testing.T) {
	h := startRunner(t)
	decode(t, h.do(t, http.MethodPut, filesPath("r.txt"), strings.NewReader("0123456789")), http.StatusCreated, nil)
	resp := h.do(t, http.MethodGet, filesPath("r.txt"), nil, "Range", "bytes=3-6")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || string(b) != "3456" || resp.Header.Get("Content-Range") != "bytes 3-6/10" {
		t.Fatalf("range: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	resp = h.do(t, http.MethodGet, filesPath("r.txt"), nil, "Range", "bytes=7-")
	if b, _ = io.ReadAll(resp.Body); string(b) != "789" {
		t.Fatalf("open range %q", b)
	}
	if resp = h.do(t, http.MethodGet, filesPath("r.txt"), nil, "Range", "bytes=20-30"); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("unsatisfiable range: %d", resp.StatusCode)
	}
}

// Every new operation goes through the same confinement as read and write: "..", absolute paths and
// symlinks leading outside are refused with typed errors, and nothing appears outside.
func TestFilesOpsPathEscapes(t *testing.T) {
	h := startRunner(t)
	outside := filepath.Join(h.base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(h.secretVal), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"etc": "/etc", "outdir": outside, "up": "..", "pw": "/etc/passwd"} {
		if err := os.Symlink(target, filepath.Join(h.ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	decode(t, h.do(t, http.MethodPut, filesPath("mine.txt"), strings.NewReader("mine")), http.StatusCreated, nil)
	for _, tt := range []struct {
		path string
		code wire.Code
	}{
		{"../x", wire.PermissionDenied}, {"a/../../x", wire.PermissionDenied}, {"/etc", wire.PermissionDenied},
		{"etc/passwd", wire.PermissionDenied}, {"outdir/secret.txt", wire.PermissionDenied},
		{"up/workspace", wire.PermissionDenied}, {"a\x00b", wire.InvalidArgument},
	} {
		t.Run(tt.path, func(t *testing.T) {
			wantError(t, h.do(t, http.MethodGet, fileRoute("stat", tt.path), nil), tt.code)
			wantError(t, h.do(t, http.MethodPost, fileRoute("mkdir", tt.path+"/d", "parents", "true"), nil), tt.code)
			wantError(t, h.move(t, wire.FileMoveRequest{From: "mine.txt", To: tt.path + "/stolen", Parents: true}), tt.code)
			wantError(t, h.move(t, wire.FileMoveRequest{From: tt.path, To: "got"}), tt.code)
			wantError(t, h.do(t, http.MethodGet, fileRoute("watch", tt.path), nil, "Accept", "text/event-stream"), tt.code)
			wantError(t, h.do(t, http.MethodDelete, filesPath(tt.path, "recursive", "true"), nil), tt.code)
		})
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Fatalf("outside the workspace now: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(h.ws, "mine.txt")); err != nil {
		t.Fatalf("mine.txt moved away: %v", err)
	}
	// A symlink moved is the link itself: its target stays where it is.
	decode(t, h.move(t, wire.FileMoveRequest{From: "outdir", To: "renamed-link"}), http.StatusOK, nil)
	if _, err := os.Stat(filepath.Join(outside, "secret.txt")); err != nil {
		t.Fatal(err)
	}
}

// watchStream opens a watch and returns its events and the ready event's data.
func watchStream(t *testing.T, h *harness, query string) (*sseReader, wire.FileWatchReady, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/v1/sandbox/files/watch?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+h.key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch: %d %s", resp.StatusCode, b)
	}
	sse := newSSEReader(resp.Body)
	ev, err := sse.next()
	var ready wire.FileWatchReady
	if err != nil || ev.name != wire.EventWatchReady || json.Unmarshal([]byte(ev.data), &ready) != nil {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	return sse, ready, resp
}

// changes reads change events until done says it has seen enough, and returns them with the overflows.
func changes(t *testing.T, sse *sseReader, done func(seen map[string][]string) bool) (map[string][]string, []wire.FileWatchOverflow) {
	t.Helper()
	seen := map[string][]string{}
	var over []wire.FileWatchOverflow
	for !done(seen) {
		ev, err := sse.next()
		if err != nil {
			t.Fatalf("watch stream after %v: %v", seen, err)
		}
		switch ev.name {
		case wire.EventFileChange:
			var fe wire.FileEvent
			if err := json.Unmarshal([]byte(ev.data), &fe); err != nil {
				t.Fatal(err)
			}
			seen[fe.Path] = append(seen[fe.Path], fe.Ops...)
		case wire.EventWatchOverflow:
			var o wire.FileWatchOverflow
			_ = json.Unmarshal([]byte(ev.data), &o)
			over = append(over, o)
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	return seen, over
}

func execOK(t *testing.T, h *harness, cmd string) {
	t.Helper()
	if res := h.exec(t, wire.ExecRequest{Command: cmd}); res.ExitCode != 0 {
		t.Fatalf("%s: exit %d: %s", cmd, res.ExitCode, res.Stderr)
	}
}

func has(ops []string, op string) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

// A recursive watch sees what a command in the sandbox does, in new subdirectories too, with paths
// relative to the workspace; a symlink to a host directory is not followed; the stream ends when the
// watched directory goes.
func TestFileWatch(t *testing.T) {
	h := startRunner(t)
	outside := filepath.Join(h.base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	execOK(t, h, "mkdir proj && ln -s "+outside+" proj/out")
	sse, ready, _ := watchStream(t, h, "path=proj&debounceMs=20")
	if ready.Path != "proj" || !ready.Recursive || ready.Dirs != 1 || ready.DebounceMs != 20 {
		t.Fatalf("ready %+v", ready)
	}
	// A change outside, through the symlink's target, then one inside: only the inside one is seen.
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	execOK(t, h, "cd proj && mkdir -p deep/er && echo one > deep/er/f.txt && echo top > top.txt && mv top.txt moved.txt && echo more >> moved.txt")
	seen, _ := changes(t, sse, func(s map[string][]string) bool {
		return has(s["proj/deep/er/f.txt"], wire.FileOpCreate) && has(s["proj/moved.txt"], wire.FileOpWrite)
	})
	for p := range seen {
		if strings.Contains(p, "secret") || strings.Contains(p, "out/") {
			t.Fatalf("saw a change outside the workspace: %s in %v", p, seen)
		}
	}
	if !has(seen["proj/deep"], wire.FileOpCreate) || !has(seen["proj/top.txt"], wire.FileOpCreate) ||
		!has(seen["proj/top.txt"], wire.FileOpRename) || !has(seen["proj/moved.txt"], wire.FileOpCreate) {
		t.Fatalf("changes %v", seen)
	}
	// The new subdirectory is watched: a change deep inside it is seen on its own.
	execOK(t, h, "echo two >> proj/deep/er/f.txt")
	_, _ = changes(t, sse, func(s map[string][]string) bool { return has(s["proj/deep/er/f.txt"], wire.FileOpWrite) })
	// A renamed subdirectory is watched under its new name, and not under the old one.
	execOK(t, h, "mv proj/deep proj/renamed && echo three > proj/renamed/er/g.txt")
	seen, _ = changes(t, sse, func(s map[string][]string) bool { return has(s["proj/renamed/er/g.txt"], wire.FileOpCreate) })
	if !has(seen["proj/deep"], wire.FileOpRename) {
		t.Fatalf("rename of a directory: %v", seen)
	}
	for p := range seen {
		if strings.HasPrefix(p, "proj/deep/") {
			t.Fatalf("a change under the old name: %v", seen)
		}
	}
	// Uploads through the API are reported under their final name only.
	decode(t, h.do(t, http.MethodPut, filesPath("proj/up.txt"), strings.NewReader("x")), http.StatusCreated, nil)
	seen, _ = changes(t, sse, func(s map[string][]string) bool { return has(s["proj/up.txt"], wire.FileOpCreate) })
	for p := range seen {
		if strings.Contains(p, ".warren-upload-") {
			t.Fatalf("an upload's temporary file was reported: %v", seen)
		}
	}
	// Removing the watched directory ends the stream after its own change.
	if resp := h.do(t, http.MethodDelete, filesPath("proj", "recursive", "true"), nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	for {
		_, err := sse.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the watch to be released", func() bool {
		return strings.Contains(metrics(t, h), "warren_runner_file_watches 0") &&
			strings.Contains(metrics(t, h), "warren_runner_file_watched_dirs 0")
	})
}

// A non-recursive watch reports a new subdirectory but not what happens inside it.
func TestFileWatchNotRecursive(t *testing.T) {
	h := startRunner(t)
	sse, ready, _ := watchStream(t, h, "recursive=false")
	if ready.Path != "." || ready.Recursive {
		t.Fatalf("ready %+v", ready)
	}
	execOK(t, h, "mkdir sub && echo x > sub/inner.txt && echo y > marker.txt")
	seen, _ := changes(t, sse, func(s map[string][]string) bool { return has(s["marker.txt"], wire.FileOpCreate) })
	if !has(seen["sub"], wire.FileOpCreate) {
		t.Fatalf("changes %v", seen)
	}
	if _, ok := seen["sub/inner.txt"]; ok {
		t.Fatalf("a non-recursive watch saw inside a subdirectory: %v", seen)
	}
}

// The bounds: a watch needs Accept: text/event-stream and a directory, a sandbox has at most 8 watches,
// watches end when their client leaves and when the sandbox stops.
func TestFileWatchBounds(t *testing.T) {
	h := startRunner(t, func(c *runner.Config) { c.ShutdownTimeout = 5 * time.Second })
	wantError(t, h.do(t, http.MethodGet, fileRoute("watch", "."), nil), wire.InvalidArgument)
	decode(t, h.do(t, http.MethodPut, filesPath("f.txt"), strings.NewReader("x")), http.StatusCreated, nil)
	wantError(t, h.do(t, http.MethodGet, fileRoute("watch", "f.txt"), nil, "Accept", "text/event-stream"), wire.InvalidArgument)
	wantError(t, h.do(t, http.MethodGet, fileRoute("watch", "nope"), nil, "Accept", "text/event-stream"), wire.NotFound)
	wantError(t, h.do(t, http.MethodGet, fileRoute("watch", ".", "debounceMs", "1"), nil, "Accept", "text/event-stream"), wire.InvalidArgument)

	var streams []*sseReader
	var resps []*http.Response
	for range 8 {
		sse, _, resp := watchStream(t, h, "")
		streams, resps = append(streams, sse), append(resps, resp)
	}
	wantError(t, h.do(t, http.MethodGet, fileRoute("watch", "."), nil, "Accept", "text/event-stream"), wire.ResourceExhausted)
	resps[0].Body.Close() // a client leaves: its place is free again
	waitFor(t, "a watch to end", func() bool { return strings.Contains(metrics(t, h), "warren_runner_file_watches 7") })
	_, _, _ = watchStream(t, h, "")

	// The sandbox stops: every stream ends.
	h.stop()
	for _, sse := range streams[1:] {
		for {
			_, err := sse.next()
			if err != nil {
				break
			}
		}
	}
}
