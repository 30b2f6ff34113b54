package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// warrenBuild is the test binary's one build of cmd/warren.
var warrenBuild struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

const warrenBinPrefix = "warren-bin-"

// WarrenBinary builds github.com/warren-mesh/warren/cmd/warren once per test binary and returns the path of
// the result. The binary lives in a temporary directory named after the test binary's pid; nothing removes
// it when the test binary exits (tests in other goroutines may still run it), so each build first removes
// the directories of test binaries that are gone. A failed build fails every test that asks.
func WarrenBinary(t testing.TB) string {
	t.Helper()
	b := &warrenBuild
	b.once.Do(func() {
		sweepStaleWarren()
		dir, err := os.MkdirTemp("", warrenBinPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "warren")
		b.out, b.err = exec.Command("go", "build", "-o", b.path, "github.com/warren-mesh/warren/cmd/warren").CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("build warren: %v\n%s", b.err, b.out)
	}
	return b.path
}

// sweepStaleWarren removes the build directories of test binaries that no longer run.
func sweepStaleWarren() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), warrenBinPrefix+"*"))
	for _, d := range dirs {
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), warrenBinPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if processGone(pid) {
			os.RemoveAll(d)
		}
	}
}

// StartWarren runs `warren args...` (the WarrenBinary build) with env added to the test's environment,
// waits until a line of its output (stdout and stderr) matches ready, and returns ready's first submatch
// (say the address it listens on). It is stopped with SIGTERM when t ends, and its output is logged if t
// failed; a process that exits first, or is not ready within a minute, fails t with its output.
func StartWarren(t testing.TB, env []string, ready *regexp.Regexp, args ...string) string {
	t.Helper()
	bin := WarrenBinary(t)
	p := &proc{title: "warren " + args[0], stopSig: syscall.SIGTERM, grace: 20 * time.Second}
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	if err := p.start(cmd); err != nil {
		t.Fatalf("start %s: %v", p.title, err)
	}
	p.stopAtCleanup(t, nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s output:\n%s", p.title, p.logTail())
		}
	})
	var match string
	err := p.awaitReady(time.Minute, 20*time.Millisecond, func() error {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if m := ready.FindStringSubmatch(line); len(m) > 1 {
				match = m[1]
				return nil
			}
		}
		return fmt.Errorf("no line matches %s yet", ready)
	})
	if err != nil {
		t.Fatalf("%s: %v", p.title, err)
	}
	return match
}
