package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// This file starts Vault (the Secrets port's production store, docs/ARCHITECTURE.md#ports-and-adapters) as `vault server -dev`: the
// binary `make tools` builds, listening only on 127.0.0.1, unsealed, with KV v2 mounted at secret/ and a
// random root token. Each StartVault is a server of its own, a child of the test binary with a parent-death
// signal, stopped and its directory removed in t.Cleanup.
//
// A dev server keeps everything in memory: Stop then Start gives a server on the same address with the
// same root token but none of the data, mounts or auth methods written before. Tests of recovery write
// what they need again after Start.

// VaultServer is a Vault dev server that a test owns. Methods may be called from one goroutine at a time.
type VaultServer struct {
	bin   string
	dir   string // temporary directory: HOME and log
	port  int
	token string
	proc  proc
}

const (
	vaultStalePrefix = "warren-vault-"
	vaultLogFile     = "vault.log"
)

// StartVault starts a Vault dev server for t alone and stops it when t ends. Skips under -short; fails when
// the vault binary is missing (run `make tools`).
func StartVault(t testing.TB) *VaultServer {
	t.Helper()
	bin := Binary(t, "vault")
	s, err := startVault(bin)
	if err != nil {
		t.Fatalf("start Vault: %v", err)
	}
	s.proc.stopAtCleanup(t, func() error { return os.RemoveAll(s.dir) })
	return s
}

// Addr is the server's URL, http://127.0.0.1:port.
func (s *VaultServer) Addr() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// RootToken is the dev server's root token; it stays the same across Stop and Start.
func (s *VaultServer) RootToken() string { return s.token }

// Client is a Vault API client of the root token.
func (s *VaultServer) Client(t testing.TB) *vaultapi.Client {
	t.Helper()
	cfg := vaultapi.DefaultConfig()
	cfg.Address = s.Addr()
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(s.token)
	return c
}

// MountMeshPKI mounts a PKI engine at mount with a generated root and a role that issues the mesh's edge
// certificates (docs/ARCHITECTURE.md#regions): EC P-256, client and server use, any region's URI SAN
// urn:warren:region:<region> and nothing else, 24 h by default.
func (s *VaultServer) MountMeshPKI(t testing.TB, mount, role string) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Sys().MountWithContext(ctx, mount, &vaultapi.MountInput{
		Type: "pki", Config: vaultapi.MountConfigInput{MaxLeaseTTL: "87600h"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		path string
		data map[string]any
	}{
		{mount + "/root/generate/internal", map[string]any{"common_name": "warren mesh test root", "ttl": "87600h", "key_type": "ec"}},
		{mount + "/roles/" + role, map[string]any{
			"allowed_uri_sans": "urn:warren:region:*", "require_cn": false, "key_type": "ec", "key_bits": 256,
			"server_flag": true, "client_flag": true, "max_ttl": "72h", "ttl": "24h",
		}},
	} {
		if _, err := c.Logical().WriteWithContext(ctx, w.path, w.data); err != nil {
			t.Fatalf("Vault %s: %v", w.path, err)
		}
	}
}

// Running reports whether the server process is up.
func (s *VaultServer) Running() bool { return s.proc.running() }

// Stop shuts the server down; clients see connection errors until Start. Its data is gone for good.
func (s *VaultServer) Stop(t testing.TB) {
	t.Helper()
	s.proc.stopOrFatal(t)
}

// Start starts a stopped server again on the same address with the same root token, and waits until it is
// unsealed and active. It is a new, empty dev server: only the secret/ KV v2 mount is there.
func (s *VaultServer) Start(t testing.TB) {
	t.Helper()
	s.proc.restartOrFatal(t, s.start)
}

func startVault(bin string) (*VaultServer, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	dir, err := ownedTempDir(vaultStalePrefix, os.RemoveAll)
	if err != nil {
		return nil, err
	}
	s := &VaultServer{
		bin:   bin,
		dir:   dir,
		token: "root-" + hex.EncodeToString(b),
		proc: proc{
			title:   "Vault",
			stopSig: syscall.SIGTERM,
			grace:   30 * time.Second,
			logPath: filepath.Join(dir, vaultLogFile),
		},
	}
	err = withFreePorts(1, func(p []int) error {
		s.port = p[0]
		return s.start()
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// start runs the dev server as a child of the test binary and waits until /v1/sys/health answers 200
// (initialized, unsealed, active).
func (s *VaultServer) start() error {
	cmd := exec.Command(s.bin, "server", "-dev",
		"-dev-root-token-id="+s.token,
		"-dev-listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		"-dev-no-store-token",
		"-log-level=warn",
	)
	// No VAULT_* variables of the caller's environment reach the server; HOME is the temporary directory so
	// nothing is written to the real one. Vault 1.14 links a database plugin whose init parses a CA
	// certificate with a negative serial number, which Go 1.23 and later refuse unless told otherwise.
	cmd.Env = []string{"HOME=" + s.dir, "PATH=/usr/bin:/bin", "TZ=UTC", "GODEBUG=x509negativeserial=1"}
	cmd.Dir = s.dir
	if err := s.proc.start(cmd); err != nil {
		return err
	}
	health := func() error { return getJSON(s.Addr()+"/v1/sys/health", nil) }
	if err := s.proc.awaitReady(60*time.Second, 25*time.Millisecond, health); err != nil {
		return fmt.Errorf("vault on port %d: %w", s.port, err)
	}
	return nil
}
