// Package local is the scheduler Driver of warren dev: every sandbox is a `warren runner` child process on
// this machine, with its own workspace and state directory under the data dir, its own loopback port and
// its own random bearer key. The runner itself applies the bubblewrap boundary to what it runs.
package local

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/scheduler"
)

// Config configures the local driver.
type Config struct {
	Binary    string   // the warren binary to run as `warren runner`
	DataDir   string   // sandboxes live in DataDir/sandboxes/<id>/{workspace,state}
	Insecure  bool     // pass -insecure-no-sandbox to runners
	ExtraArgs []string // appended to the runner's flags
	Env       []string // extra environment for runners (the runner clears it for user commands)
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL (default 30s). It must cover the
	// runner's graceful shutdown plus its final snapshot (twice the runner's ShutdownTimeout and a margin),
	// or a killed final snapshot loses the last turn.
	StopGrace time.Duration
	Logger    *slog.Logger
}

// Driver starts runner processes. Safe for concurrent use.
type Driver struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	procs map[string]*proc // by alloc (pid)
}

type proc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	exited chan struct{}
}

var _ scheduler.Driver = (*Driver)(nil)

// New checks cfg and returns a driver.
func New(cfg Config) (*Driver, error) {
	if cfg.Binary == "" {
		return nil, errors.New("local driver: binary is required")
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("local driver: runner binary: %w", err)
	}
	if cfg.DataDir == "" {
		return nil, errors.New("local driver: data dir is required")
	}
	// Runners run with their state dir as working directory: every path handed to them must be absolute.
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("local driver: data dir: %w", err)
	}
	cfg.DataDir = abs
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 30 * time.Second
	}
	return &Driver{cfg: cfg, log: cfg.Logger, procs: map[string]*proc{}}, nil
}

type readyLine struct {
	Event string `json:"event"`
	Addr  string `json:"addr"`
	PID   int    `json:"pid"`
}

// Start launches `warren runner` for spec and waits for its ready line.
func (d *Driver) Start(ctx context.Context, spec scheduler.Spec) (scheduler.Sandbox, error) {
	dir := filepath.Join(d.cfg.DataDir, "sandboxes", spec.ID)
	ws, state, home := filepath.Join(dir, "workspace"), filepath.Join(dir, "state"), filepath.Join(dir, "home")
	for _, p := range []string{ws, state, home} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return scheduler.Sandbox{}, fmt.Errorf("create sandbox dir: %w", err)
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return scheduler.Sandbox{}, fmt.Errorf("runner key: %w", err)
	}
	keyHex := hex.EncodeToString(key)
	args := []string{"runner",
		"-issuer", spec.Issuer, "-user", spec.User, "-epoch", strconv.FormatInt(spec.Epoch, 10),
		"-region", spec.Region, "-listen", "127.0.0.1:0",
		"-workspace", ws, "-state-dir", state, "-home", home, "-snapshot-prefix", "sandboxes/" + spec.ID,
		"-watch-stdin",
	}
	if d.cfg.Insecure {
		args = append(args, "-insecure-no-sandbox")
	}
	args = append(args, d.cfg.ExtraArgs...)
	if spec.Template != "" {
		// After ExtraArgs: the token's template wins over a -template the operator set as the default.
		args = append(args, "-template", spec.Template)
	}
	cmd := exec.Command(d.cfg.Binary, args...)
	cmd.Dir = state
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + state, "WARREN_RUNNER_KEY=" + keyHex}, d.cfg.Env...)
	// The runner dies with us: SIGKILL on parent death, and -watch-stdin on the pipe below.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(state, "runner.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return scheduler.Sandbox{}, fmt.Errorf("runner log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return scheduler.Sandbox{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = stdin.Close()
		return scheduler.Sandbox{}, err
	}
	if err := cmd.Start(); err != nil {
		return scheduler.Sandbox{}, fmt.Errorf("start runner: %w", err)
	}
	p := &proc{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	alloc := strconv.Itoa(cmd.Process.Pid)

	// Registered before the wait goroutine can run, so its delete always follows this insert.
	d.mu.Lock()
	d.procs[alloc] = p
	d.mu.Unlock()
	ready := make(chan readyLine, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var rl readyLine
			if json.Unmarshal(sc.Bytes(), &rl) == nil && rl.Event == "ready" && rl.Addr != "" {
				ready <- rl
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout) // keep draining so the runner never blocks on stdout
	}()
	go func() {
		err := cmd.Wait()
		d.log.Info("runner exited", "alloc", alloc, "issuer", spec.Issuer, "user", spec.User, "epoch", spec.Epoch, "err", err)
		d.mu.Lock()
		delete(d.procs, alloc)
		d.mu.Unlock()
		close(p.exited)
	}()

	select {
	case rl := <-ready:
		return scheduler.Sandbox{Alloc: alloc, Addr: rl.Addr, Key: keyHex, Exited: p.exited}, nil
	case <-p.exited:
		return scheduler.Sandbox{}, fmt.Errorf("runner exited before it was ready (see %s)", filepath.Join(state, "runner.log"))
	case <-ctx.Done():
		d.kill(p)
		<-p.exited
		return scheduler.Sandbox{}, fmt.Errorf("runner not ready: %w", ctx.Err())
	}
}

// Stop asks the runner to exit (SIGTERM), escalating to SIGKILL of its process group after a grace period.
func (d *Driver) Stop(ctx context.Context, alloc string) error {
	d.mu.Lock()
	p := d.procs[alloc]
	d.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.stdin.Close()
	grace := time.NewTimer(d.cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-p.exited:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	d.kill(p)
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop runner %s: %w", alloc, ctx.Err())
	}
}

func (d *Driver) kill(p *proc) {
	// Negative pid: the runner's process group. bubblewrap and the agent's processes have groups of their
	// own and die with the runner through Pdeathsig (and --die-with-parent).
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}
