package devstack_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// watching follows a watch in the background: its events arrive on the returned channel (closed at the
// end, after an error event if any), and it returns once the watch is ready.
func watching(t testing.TB, ctx context.Context, sb *warren.Sandbox, path string, opt *warren.WatchOptions) (<-chan warren.WatchEvent, <-chan error) {
	t.Helper()
	evs, errs := make(chan warren.WatchEvent, 1024), make(chan error, 1)
	ready := make(chan warren.FileWatchReady, 1)
	go func() {
		defer close(evs)
		for ev, err := range sb.Watch(ctx, path, opt) {
			if err != nil {
				errs <- err
				return
			}
			if ev.Ready != nil {
				ready <- *ev.Ready
				continue
			}
			evs <- ev
		}
	}()
	select {
	case <-ready:
	case err := <-errs:
		t.Fatalf("watch %s: %v", path, err)
	case <-ctx.Done():
		t.Fatalf("watch %s never became ready", path)
	}
	return evs, errs
}

// until collects change events, merged by path, until done holds of them.
func until(t *testing.T, evs <-chan warren.WatchEvent, done func(map[string][]string) bool) map[string][]string {
	t.Helper()
	seen := map[string][]string{}
	for !done(seen) {
		ev, ok := <-evs
		if !ok {
			t.Fatalf("the watch ended; seen %v", seen)
		}
		if ev.Overflow != nil {
			t.Fatalf("overflow: %+v", ev.Overflow)
		}
		seen[ev.Change.Path] = append(seen[ev.Change.Path], ev.Change.Ops...)
	}
	return seen
}

// Every file operation through the edge with the user's token, against a real runner under bubblewrap:
// mkdir -p, stat, move, a 48 MiB streamed upload and download (whole and ranged), recursive delete, and a
// recursive watch that sees what a command run through exec and the API do, including in directories
// made after it started; then the attacks (.., absolute paths, symlinks out), refused with typed errors.
func TestFilesThroughTheEdge(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	sb := client(t, st, "files").Sandbox()

	if _, err := sb.Mkdir(ctx, "proj", false); err != nil {
		t.Fatal(err)
	}
	evs, _ := watching(t, ctx, sb, "proj", &warren.WatchOptions{Debounce: 20 * time.Millisecond})

	fi, err := sb.Mkdir(ctx, "proj/src/pkg", true)
	if err != nil || fi.Path != "proj/src/pkg" || fi.Type != "dir" {
		t.Fatalf("mkdir -p: %+v %v", fi, err)
	}
	if _, err := sb.Mkdir(ctx, "proj/src/pkg", true); err != nil {
		t.Fatalf("mkdir -p of an existing directory: %v", err)
	}
	if _, err := sb.Mkdir(ctx, "proj/src", false); !warren.IsCode(err, wire.Conflict) {
		t.Fatalf("mkdir of an existing directory: %v", err)
	}
	res, err := sb.Exec(ctx, wire.ExecRequest{Command: "cd proj && mkdir -p gen/deep && echo one > gen/deep/f.txt && " +
		"echo x > t.txt && mv t.txt u.txt && echo more >> src/pkg/p.go && rm -r gen"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	seen := until(t, evs, func(s map[string][]string) bool {
		return slices.Contains(s["proj/gen"], warren.FileOpRemove) && slices.Contains(s["proj/u.txt"], warren.FileOpCreate) &&
			slices.Contains(s["proj/src/pkg/p.go"], warren.FileOpWrite)
	})
	if !slices.Contains(seen["proj/src/pkg"], warren.FileOpCreate) || !slices.Contains(seen["proj/t.txt"], warren.FileOpRename) {
		t.Fatalf("changes %v", seen)
	}

	fi, err = sb.Stat(ctx, "proj/u.txt")
	if err != nil || fi.Type != "file" || fi.Size != 2 || fi.Path != "proj/u.txt" {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	fi, err = sb.Move(ctx, "proj/u.txt", "proj/out/u2.txt", &warren.MoveOptions{Parents: true})
	if err != nil || fi.Path != "proj/out/u2.txt" {
		t.Fatalf("move: %+v %v", fi, err)
	}
	if _, err := sb.Move(ctx, "proj/src/pkg/p.go", "proj/out/u2.txt", nil); !warren.IsCode(err, wire.Conflict) {
		t.Fatalf("move onto an existing file without overwrite: %v", err)
	}
	until(t, evs, func(s map[string][]string) bool {
		return slices.Contains(s["proj/u.txt"], warren.FileOpRename) && slices.Contains(s["proj/out/u2.txt"], warren.FileOpCreate)
	})

	// A large file streams both ways: the upload has no length (chunked), the download is hashed as it
	// arrives, and a range of it comes back alone.
	const size = 48 << 20
	src := func() io.Reader { return io.LimitReader(rand.NewChaCha8([32]byte{7}), size) }
	want := sha256.New()
	if _, err := io.Copy(want, src()); err != nil {
		t.Fatal(err)
	}
	fw, err := sb.WriteFile(ctx, "proj/big.bin", struct{ io.Reader }{src()})
	if err != nil || fw.Size != size {
		t.Fatalf("upload: %+v %v", fw, err)
	}
	rc, err := sb.Open(ctx, "proj/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, rc)
	rc.Close()
	if err != nil || n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("download: %d bytes, %v, hash equal %v", n, err, bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
	rc, err = sb.OpenRange(ctx, "proj/big.bin", size-100, 50)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(rc)
	rc.Close()
	whole, _ := io.ReadAll(src())
	if !bytes.Equal(part, whole[size-100:size-50]) {
		t.Fatalf("range: %d bytes differ", len(part))
	}
	until(t, evs, func(s map[string][]string) bool { return slices.Contains(s["proj/big.bin"], warren.FileOpCreate) })

	// Attacks: symlinks made in the sandbox that lead out, "..", absolute paths.
	if res, err := sb.Exec(ctx, wire.ExecRequest{Command: "ln -s /etc etcl && ln -s .. up && ln -s / rootl"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	for _, p := range []string{"etcl/passwd", "up/x", "rootl", "../x", "/etc/passwd", "proj/../../x"} {
		if _, err := sb.Stat(ctx, p); !warren.IsCode(err, wire.PermissionDenied) && p != "rootl" {
			t.Errorf("stat %s: %v", p, err)
		}
		if _, err := sb.Mkdir(ctx, p+"/d", true); !warren.IsCode(err, wire.PermissionDenied) {
			t.Errorf("mkdir %s: %v", p, err)
		}
		if _, err := sb.Move(ctx, "proj/out/u2.txt", p+"/stolen", &warren.MoveOptions{Parents: true}); !warren.IsCode(err, wire.PermissionDenied) {
			t.Errorf("move to %s: %v", p, err)
		}
		if err := sb.Remove(ctx, p+"/x", true); !warren.IsCode(err, wire.PermissionDenied) {
			t.Errorf("remove %s: %v", p, err)
		}
		if p != "rootl" { // the link itself is in the workspace; what it names is not
			for _, err := range sb.Watch(ctx, p, nil) {
				if !warren.IsCode(err, wire.PermissionDenied) {
					t.Errorf("watch %s: %v", p, err)
				}
				break
			}
		}
	}
	for _, err := range sb.Watch(ctx, "rootl", nil) {
		if !warren.IsCode(err, wire.PermissionDenied) {
			t.Errorf("watch through a symlink to /: %v", err)
		}
		break
	}
	if _, err := sb.Stat(ctx, "proj/out/u2.txt"); err != nil {
		t.Fatalf("the file the attacks tried to move: %v", err)
	}

	// Recursive delete of the watched directory: its removal is the watch's last event.
	if err := sb.Remove(ctx, "proj", true); err != nil {
		t.Fatal(err)
	}
	until(t, evs, func(s map[string][]string) bool { return slices.Contains(s["proj"], warren.FileOpRemove) })
	for ev := range evs {
		if ev.Change == nil || !strings.HasPrefix(ev.Change.Path, "proj") {
			t.Fatalf("after the removal: %+v", ev)
		}
	}
	if _, err := sb.Stat(ctx, "proj"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
}

// BenchmarkWatchLatency: a file written in the workspace (on the host, as a command in the sandbox
// would) until its change event arrives through the edge, with the shortest debounce window (10ms) which
// every event waits out. Reports p50/p99 in µs and the part beyond the window.
func BenchmarkWatchLatency(b *testing.B) {
	st, err := devstack.Start(context.Background(), devstack.Config{
		DataDir: b.TempDir(), Listen: "127.0.0.1:0", Binary: binary,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sb := client(b, st, "watchbench").Sandbox()
	const window = 10 * time.Millisecond
	evs, errs := watching(b, ctx, sb, ".", &warren.WatchOptions{Debounce: window})
	wss, _ := filepath.Glob(filepath.Join(st.Config().DataDir, "sandboxes", "*", "workspace"))
	if len(wss) != 1 {
		b.Fatalf("workspaces %v", wss)
	}
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		i++
		name := "f" + strconv.Itoa(i)
		start := time.Now()
		if err := os.WriteFile(filepath.Join(wss[0], name), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		for {
			ev, ok := <-evs
			if !ok {
				b.Fatalf("watch ended: %v", <-errs)
			}
			if ev.Change != nil && ev.Change.Path == name {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportQuantiles(b, lat)
	slices.Sort(lat)
	b.ReportMetric(float64((lat[len(lat)/2] - window).Microseconds()), "p50-beyond-window-µs")
}

// cliFilesWatch is the files part of the README tour past get/put/ls/rm (TestCLITour): a watch with the
// real binary prints what mkdir -p, mv and a command do as JSON lines and ends cleanly on SIGINT; stat
// describes the moved file.
func cliFilesWatch(t *testing.T, run func(stdin string, args ...string) (string, string, int), st *devstack.Stack) {
	t.Helper()
	if _, stderr, code := run("", "files", "mkdir", "src"); code != 0 {
		t.Fatalf("files mkdir: %q %d", stderr, code)
	}
	cmd := exec.Command(binary, "files", "watch", "-json", "-debounce", "10ms", "src")
	cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+os.Getenv("TOUR_TOKEN"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	next := func() warren.WatchEvent {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("files watch ended: %v %s", lines.Err(), errb.String())
		}
		var ev warren.WatchEvent
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("files watch printed %q: %v", lines.Text(), err)
		}
		return ev
	}
	if ev := next(); ev.Ready == nil || ev.Ready.Path != "src" {
		t.Fatalf("first line %+v", ev)
	}
	if _, stderr, code := run("", "files", "mkdir", "-p", "src/pkg/deep"); code != 0 {
		t.Fatalf("files mkdir -p: %q %d", stderr, code)
	}
	if _, stderr, code := run("", "exec", "--", "echo hi > src/pkg/deep/f.txt"); code != 0 {
		t.Fatalf("exec: %q %d", stderr, code)
	}
	if _, stderr, code := run("", "files", "mv", "-p", "src/pkg/deep/f.txt", "src/moved/g.txt"); code != 0 {
		t.Fatalf("files mv: %q %d", stderr, code)
	}
	seen := map[string][]string{}
	for !slices.Contains(seen["src/moved/g.txt"], warren.FileOpCreate) {
		if ev := next(); ev.Change != nil {
			seen[ev.Change.Path] = append(seen[ev.Change.Path], ev.Change.Ops...)
		}
	}
	if !slices.Contains(seen["src/pkg/deep/f.txt"], warren.FileOpCreate) || !slices.Contains(seen["src/pkg"], warren.FileOpCreate) {
		t.Fatalf("files watch saw %v", seen)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("files watch after SIGINT: %v %s", err, errb.String())
	}
	outS, stderr, code := run("", "files", "stat", "src/moved/g.txt")
	var fi warren.FileInfo
	if code != 0 || json.Unmarshal([]byte(outS), &fi) != nil || fi.Type != "file" || fi.Size != 3 {
		t.Fatalf("files stat: %q %q %d", outS, stderr, code)
	}
	if _, stderr, code := run("", "files", "mv", "src/moved/g.txt", "../out"); code == 0 || !strings.Contains(stderr, "permission") {
		t.Fatalf("files mv out of the workspace: %q %d", stderr, code)
	}
}
