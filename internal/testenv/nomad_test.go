package testenv_test

import (
	"context"
	"encoding/json"
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

// Two agents of regions r1 and r2 federate with Join: each lists both regions and answers a request for the
// other region's nodes with that region's node (forwarded).
func TestNomadFederation(t *testing.T) {
	r1 := testenv.StartNomad(t, testenv.NomadOptions{Region: "r1"})
	r2 := testenv.StartNomad(t, testenv.NomadOptions{Region: "r2"})
	r1.Join(t, r2)
	for _, tc := range []struct {
		via   *testenv.NomadServer
		other *testenv.NomadServer
		name  string
	}{{r1, r2, "r2"}, {r2, r1, "r1"}} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, tc.via.Addr()+"/v1/nodes?region="+tc.name, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var nodes []struct{ ID string }
		err = json.NewDecoder(resp.Body).Decode(&nodes)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != 1 || nodes[0].ID != tc.other.NodeID() {
			t.Fatalf("nodes of %s through the other agent: %+v, want %s", tc.name, nodes, tc.other.NodeID())
		}
	}
}
