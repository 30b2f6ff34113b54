package testenv_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/testenv"
)

// A dev agent comes up with one ready node whose raw_exec driver is healthy, answers on Addr, and its data
// directory (tmpfs mounts included) is gone after its test.
func TestNomadStarts(t *testing.T) {
	var dir string
	t.Run("agent", func(t *testing.T) {
		ns := testenv.StartNomad(t, testenv.NomadOptions{})
		if !strings.HasPrefix(ns.Addr(), "http://127.0.0.1:") {
			t.Fatalf("Addr = %q", ns.Addr())
		}
		if ns.NodeID() == "" {
			t.Fatal("no node id")
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, ns.Addr()+"/v1/agent/self", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("agent/self = %d", resp.StatusCode)
		}
		dir = ns.DataDir()
		ns.Stop(t)
		if ns.Running() {
			t.Fatal("still running after Stop")
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data directory %s left behind: %v", dir, err)
	}
}
