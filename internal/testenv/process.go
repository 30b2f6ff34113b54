package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file holds what the real-server starters (PostgreSQL, Vault, Consul, Nomad, versitygw) share: the
// server process itself (proc), free loopback ports, readiness probes over HTTP, and the temporary
// directories servers own, with the sweep of those left behind by test binaries that were killed.

// proc is a server process a test owns, which may be stopped and started again. Each run is a child of the
// test binary with a parent-death signal, so a test binary that is killed or times out takes the server
// with it, and a goroutine of its own waits for it. Its output is appended to a log file or, without one,
// kept in memory; the part written since the last start goes into the error when the server fails to
// start. Methods may be called from one goroutine at a time.
type proc struct {
	title   string         // the server's name in test messages: "Vault", "PostgreSQL"
	stopSig syscall.Signal // asks for a graceful shutdown
	grace   time.Duration  // how long stop waits after stopSig before it kills the process
	logPath string         // the file output is appended to; "" keeps the tail in memory

	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error         // cmd.Wait's result, set before exited is closed
	out     *tailBuffer   // the output of the current run when logPath is ""
	logOff  int64         // the log file's size when the current run started
}

const (
	memLogMax  = 32 << 10 // output kept in memory
	logTailMax = 4000     // bytes of a log file shown in an error
)

// start starts cmd and returns once it runs (see awaitReady for when it is ready). Unless cmd sets one, its
// parent-death signal is SIGKILL; its stdout and stderr are the log.
func (p *proc) start(cmd *exec.Cmd) error {
	name := filepath.Base(cmd.Path)
	if p.logPath != "" {
		f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("%s log: %w", name, err)
		}
		defer f.Close() // the child has its own copy
		if p.logOff, err = f.Seek(0, io.SeekEnd); err != nil {
			return fmt.Errorf("%s log: %w", name, err)
		}
		cmd.Stdout, cmd.Stderr = f, f
	} else {
		p.out = newTailBuffer(memLogMax)
		cmd.Stdout, cmd.Stderr = p.out, p.out
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		p.waitErr = cmd.Wait()
		close(exited)
	}()
	return nil
}

// running reports whether the process is up.
func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends stopSig and waits for the process to exit; after grace it kills it and says so. Stopping a
// process that is not running does nothing.
func (p *proc) stop() error {
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Signal(p.stopSig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", filepath.Base(p.cmd.Path), err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(p.grace):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not shut down in %v: killed", filepath.Base(p.cmd.Path), p.grace)
	}
}

// kill kills the process (SIGKILL), as a crash would end it, and waits for it to exit. Killing a process
// that is not running does nothing.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// procID names a process across pid reuse: its pid and its start time (field 22 of /proc/pid/stat).
type procID struct {
	pid   int
	start string
}

// procStat reads pid's parent and start time from /proc.
func procStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[19], err == nil
}

// children lists the processes whose parent is pid.
func children(pid int) []procID {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []procID
	for _, d := range dirs {
		c, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if ppid, start, ok := procStat(c); ok && ppid == pid {
			out = append(out, procID{c, start})
		}
	}
	return out
}

// killTree kills p and every process below it (SIGKILL), unless p's pid now names another process.
func killTree(p procID) {
	if _, start, ok := procStat(p.pid); !ok || start != p.start {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGSTOP) // no new children meanwhile
	for _, c := range children(p.pid) {
		killTree(c)
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
}

// awaitReady calls probe every interval until it succeeds, the process exits, or timeout passes. A process
// that is not ready is stopped, and the error ends with what it wrote to its log.
func (p *proc) awaitReady(timeout, interval time.Duration, probe func() error) error {
	err := p.poll(timeout, interval, probe)
	if err == nil {
		return nil
	}
	p.stop()
	return fmt.Errorf("%w\n%s", err, p.logTail())
}

func (p *proc) poll(timeout, interval time.Duration, probe func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited: %v", p.waitErr)
		case <-tick.C:
		}
	}
}

// logTail is the end of what the current run (or the last one) wrote.
func (p *proc) logTail() string {
	if p.logPath == "" {
		if p.out == nil {
			return ""
		}
		return p.out.String()
	}
	b, err := os.ReadFile(p.logPath)
	if err != nil || p.logOff > int64(len(b)) {
		return ""
	}
	b = b[p.logOff:]
	if len(b) > logTailMax {
		b = b[len(b)-logTailMax:]
	}
	return string(bytes.TrimSpace(b))
}

// stopAtCleanup stops the process when t ends, then, unless remove is nil, removes the server's files with
// it.
func (p *proc) stopAtCleanup(t testing.TB, remove func() error) {
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("stop %s: %v", p.title, err)
		}
		if remove == nil {
			return
		}
		if err := remove(); err != nil {
			t.Errorf("remove the files of %s: %v", p.title, err)
		}
	})
}

// stopOrFatal is the servers' Stop.
func (p *proc) stopOrFatal(t testing.TB) {
	t.Helper()
	if err := p.stop(); err != nil {
		t.Fatalf("stop %s: %v", p.title, err)
	}
}

// restartOrFatal is the servers' Start: start runs a stopped server again and waits until it is ready.
func (p *proc) restartOrFatal(t testing.TB, start func() error) {
	t.Helper()
	if p.running() {
		t.Fatalf("start %s: already running", p.title)
	}
	if err := start(); err != nil {
		t.Fatalf("start %s: %v", p.title, err)
	}
}

// tailBuffer is an io.Writer keeping the last max bytes written to it, safe for concurrent use (a server's
// stdout and stderr).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// withFreePorts picks n distinct free loopback ports and calls start with them, up to three times: a port
// is picked by binding :0 and closing, so another process may take it before the server binds it.
func withFreePorts(n int, start func(ports []int) error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var ports []int
		if ports, err = freePorts(n); err == nil {
			if err = start(ports); err == nil {
				return nil
			}
		}
	}
	return err
}

// freePorts picks n distinct free loopback TCP ports. Servers that also listen on UDP (Serf) use the same
// numbers there; a TCP-free port is nearly always UDP-free too, and withFreePorts retries when it is not.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// probeClient is the HTTP client of readiness probes.
var probeClient = &http.Client{Timeout: 2 * time.Second}

// getJSON GETs url with probeClient and decodes its 200 answer into v; with v nil the body is ignored.
func getJSON(url string, v any) error {
	resp, err := probeClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// putJSON PUTs to url with probeClient (no body) and decodes its 200 answer into v; with v nil the body is
// ignored.
func putJSON(url string, v any) error {
	req, err := http.NewRequest(http.MethodPut, url, nil)
	if err != nil {
		return err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("PUT %s: %s %s", url, resp.Status, bytes.TrimSpace(b))
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// ownerFile, in a server's temporary directory, holds the pid of the test binary that owns it (see
// sweepStale).
const ownerFile = "owner.pid"

// ownedTempDir makes a new temporary directory named prefix* holding ownerFile, after sweeping away the
// directories of that prefix that belong to test binaries that are gone (remove deletes one).
func ownedTempDir(prefix string, remove func(dir string) error) (string, error) {
	sweepStale(prefix, remove)
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepStale removes, with remove, the temporary directories prefix* whose test binary is gone (killed
// before Main or t.Cleanup could remove them). Their servers are gone too: the parent-death signal stopped
// them.
func sweepStale(prefix string, remove func(dir string) error) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if processGone(pid) {
			remove(d)
		}
	}
}

// processGone reports whether no process has id pid.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
