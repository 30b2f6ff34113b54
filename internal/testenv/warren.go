package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
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
