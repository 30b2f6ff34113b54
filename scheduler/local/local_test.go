package local_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/scheduler/drivertest"
	"github.com/warren-mesh/warren/scheduler/local"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "warren-local-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "warren")
		if out, err := exec.Command("go", "build", "-o", binary, "github.com/warren-mesh/warren/cmd/warren").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build warren: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

func TestContract(t *testing.T) {
	if testing.Short() {
		t.Skip("starts runner processes under bubblewrap")
	}
	d, err := local.New(local.Config{Binary: binary, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Run(t, d)
}

func TestMissingBinary(t *testing.T) {
	if _, err := local.New(local.Config{Binary: filepath.Join(t.TempDir(), "nope"), DataDir: t.TempDir()}); err == nil {
		t.Fatal("New with a missing binary succeeded")
	}
}
