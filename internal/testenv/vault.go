package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// This file starts Vault (DESIGN.md §3, the Secrets port's production store) as `vault server -dev`: the
// binary `make tools` builds, listening only on 127.0.0.1, unsealed, with KV v2 mounted at secret/ and a
// random root token. Each StartVault is a server of its own, a child of the test binary with a parent-death
// signal, stopped and its directory removed in t.Cleanup.
//
// A dev server keeps everything in memory: Stop then Start gives a server on the same address with the
// same root token but none of the data, mounts or auth methods written before. Tests of recovery write
// what they need again after Start.

// VaultServer is a Vault dev server that a test owns. Methods may be called from one goroutine at a time.
type VaultServer struct {
	bin     string
	dir     string // temporary directory: HOME and log
	port    int
	token   string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
}

// StartVault starts a Vault dev server for t alone and stops it when t ends. Skips under -short; fails when
// the vault binary is missing (run `make tools`).
func StartVault(t testing.TB) *VaultServer {
	t.Helper()
	bin := Binary(t, "vault")
	s, err := startVault(bin)
	if err != nil {
		t.Fatalf("start Vault: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stop Vault: %v", err)
		}
		if err := os.RemoveAll(s.dir); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Addr is the server's URL, http://127.0.0.1:port.
func (s *VaultServer) Addr() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// RootToken is the dev server's root token; it stays the same across Stop and Start.
func (s *VaultServer) RootToken() string { return s.token }

// Running reports whether the server process is up.
func (s *VaultServer) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop shuts the server down; clients see connection errors until Start. Its data is gone for good.
func (s *VaultServer) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatalf("stop Vault: %v", err)
	}
}

// Start starts a stopped server again on the same address with the same root token, and waits until it is
// unsealed and active. It is a new, empty dev server: only the secret/ KV v2 mount is there.
func (s *VaultServer) Start(t testing.TB) {
	t.Helper()
	if s.Running() {
		t.Fatal("start Vault: already running")
	}
	if err := s.start(); err != nil {
		t.Fatalf("start Vault: %v", err)
	}
}

const vaultStalePrefix = "warren-vault-"

func startVault(bin string) (*VaultServer, error) {
	sweepStaleVault()
	dir, err := os.MkdirTemp("", vaultStalePrefix)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &VaultServer{bin: bin, dir: dir, token: "root-" + hex.EncodeToString(b)}
	// The port is picked by binding :0 and closing; another process may take it before Vault binds, so try
	// a few.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err == nil {
			if err = s.start(); err == nil {
				return s, nil
			}
		}
		if attempt == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

const vaultLogFile = "vault.log"

// start runs the dev server as a child of the test binary and waits until /v1/sys/health answers 200
// (initialized, unsealed, active).
func (s *VaultServer) start() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, vaultLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, 2)
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
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies without stopping the server (killed, timed out), the server goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("vault: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := s.awaitReady(60 * time.Second); err != nil {
		s.stop()
		return fmt.Errorf("vault on port %d: %w\n%s", s.port, err, s.logSince(logStart))
	}
	return nil
}

// awaitReady polls /v1/sys/health until it answers 200, the process exits, or timeout passes.
func (s *VaultServer) awaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		err := s.health(client)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited: %v", s.waitErr)
		case <-tick.C:
		}
	}
}

func (s *VaultServer) health(client *http.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Addr()+"/v1/sys/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sys/health: %s", resp.Status)
	}
	return nil
}

// stop asks for a graceful shutdown (SIGTERM) and waits for the process; after 30 s it kills it.
func (s *VaultServer) stop() error {
	if !s.Running() {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		return errors.New("vault did not shut down in 30 s: killed")
	}
	return nil
}

func (s *VaultServer) logSince(off int64) string {
	b, err := os.ReadFile(filepath.Join(s.dir, vaultLogFile))
	if err != nil || off > int64(len(b)) {
		return ""
	}
	b = b[off:]
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// sweepStaleVault removes the directories of dev servers whose test binary is gone; their servers died with
// it (parent-death signal).
func sweepStaleVault() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), vaultStalePrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}
