package roles

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The mesh's stateless reset key comes from a file or the environment (then removed from it), 64 hex
// digits; anything else is refused, and neither set means none.
func TestMeshResetKey(t *testing.T) {
	dir := t.TempDir()
	good := strings.Repeat("ab", 32)
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte(good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := (&meshFlags{resetKeyFile: file}).resetKey(); err != nil || k == nil || k[0] != 0xab {
		t.Fatalf("from a file: %v, %v", k, err)
	}
	t.Setenv(resetKeyEnv, good)
	if k, err := (&meshFlags{}).resetKey(); err != nil || k == nil || k[31] != 0xab {
		t.Fatalf("from the environment: %v, %v", k, err)
	}
	if v, ok := os.LookupEnv(resetKeyEnv); ok {
		t.Fatalf("$%s left in the environment: %q", resetKeyEnv, v)
	}
	if k, err := (&meshFlags{}).resetKey(); err != nil || k != nil {
		t.Fatalf("none set: %v, %v, want none", k, err)
	}
	if err := os.WriteFile(file, []byte("abcd"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (&meshFlags{resetKeyFile: file}).resetKey(); err == nil {
		t.Fatal("a short key was accepted")
	}
}

// The announced mesh address is -mesh-addr, else the bound port on the listen host, or on this host's name
// when the listen address names none.
func TestMeshAnnouncedAddress(t *testing.T) {
	bound := &net.UDPAddr{IP: net.IPv4zero, Port: 7443}
	for _, c := range []struct {
		m    meshFlags
		want string
	}{
		{meshFlags{listen: ":0"}, "edge-1:7443"},
		{meshFlags{listen: "0.0.0.0:0"}, "edge-1:7443"},
		{meshFlags{listen: "10.0.0.5:7443"}, "10.0.0.5:7443"},
		{meshFlags{listen: ":7443", addr: "mesh.eu.example:443"}, "mesh.eu.example:443"},
	} {
		if got, err := c.m.announced(bound, "edge-1"); err != nil || got != c.want {
			t.Errorf("%+v: %q, %v, want %q", c.m, got, err, c.want)
		}
	}
	if _, err := (&meshFlags{listen: ":1", addr: "no-port"}).announced(bound, "h"); err == nil {
		t.Error("-mesh-addr without a port was accepted")
	}
}

// -mesh-listen needs exactly one certificate source; without -mesh-listen there is no mesh and its other
// flags are refused. A dev CA makes a node that listens.
func TestMeshFlagsNode(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, m := range []meshFlags{
		{listen: "127.0.0.1:0"},
		{listen: "127.0.0.1:0", caDir: t.TempDir(), pkiRole: "edge"},
		{caDir: t.TempDir()},
	} {
		if _, err := m.newEdgeMesh(ctx, "eu", nil, log, nil); err == nil {
			t.Errorf("%+v accepted", m)
		}
	}
	if em, err := (&meshFlags{}).newEdgeMesh(ctx, "eu", nil, log, nil); err != nil || em != nil {
		t.Fatalf("no -mesh-listen: %v, %v, want no mesh", em, err)
	}
	em, err := (&meshFlags{listen: "127.0.0.1:0", caDir: filepath.Join(t.TempDir(), "ca")}).newEdgeMesh(ctx, "eu", nil, log, nil)
	if err != nil || em == nil {
		t.Fatalf("dev CA: %v", err)
	}
	t.Cleanup(func() { _ = em.node.Close(ctx) })
	addr, err := em.serve(ctx, nil, "127.0.0.1:0")
	if err != nil || addr.(*net.UDPAddr).Port == 0 {
		t.Fatalf("serve: %v, %v", addr, err)
	}
}
