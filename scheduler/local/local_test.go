package local_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// A relative data dir must not put a workspace inside the runner's state dir (runners run with the state
// dir as their working directory).
func TestRelativeDataDirLandsWhereSaid(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a runner process under bubblewrap")
	}
	t.Chdir(t.TempDir())
	d, err := local.New(local.Config{Binary: binary, DataDir: "rel"})
	if err != nil {
		t.Fatal(err)
	}
	spec := drivertest.Spec("r1")
	sb, err := d.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background(), sb.Alloc)
	req, _ := http.NewRequest(http.MethodPut, "http://"+sb.Addr+"/v1/sandbox/files?path=probe.txt", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+sb.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT = %d", resp.StatusCode)
	}
	if _, err := os.Stat(filepath.Join("rel", "sandboxes", spec.ID, "workspace", "probe.txt")); err != nil {
		t.Fatalf("file not in the workspace the driver named: %v", err)
	}
}
