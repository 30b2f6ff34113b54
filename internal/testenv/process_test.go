package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A server that exits before it is ready fails awaitReady with its exit and what it wrote during that run
// only, whether its output goes to memory or to a log file; it gets a parent-death signal unless it set one.
func TestProcNotReady(t *testing.T) {
	for _, logged := range []bool{false, true} {
		t.Run(fmt.Sprintf("logfile=%v", logged), func(t *testing.T) {
			p := &proc{title: "sh", stopSig: syscall.SIGTERM, grace: 10 * time.Second}
			if logged {
				p.logPath = filepath.Join(t.TempDir(), "sh.log")
			}
			for run := 1; run <= 2; run++ {
				cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("echo run%d; exit 3", run))
				if run == 2 {
					cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT}
				}
				if err := p.start(cmd); err != nil {
					t.Fatal(err)
				}
				if want := map[int]syscall.Signal{1: syscall.SIGKILL, 2: syscall.SIGQUIT}[run]; cmd.SysProcAttr.Pdeathsig != want {
					t.Errorf("run %d: parent-death signal %v, want %v", run, cmd.SysProcAttr.Pdeathsig, want)
				}
				err := p.awaitReady(60*time.Second, 10*time.Millisecond, func() error { return errors.New("never") })
				if err == nil {
					t.Fatalf("run %d: ready", run)
				}
				msg := err.Error()
				if !strings.Contains(msg, "exited: exit status 3") || !strings.Contains(msg, fmt.Sprintf("run%d", run)) {
					t.Errorf("run %d: error %q, want the exit and the run's output", run, msg)
				}
				if run == 2 && strings.Contains(msg, "run1") {
					t.Errorf("run 2: error %q shows the first run's output", msg)
				}
				if p.running() {
					t.Fatalf("run %d: running after it exited", run)
				}
			}
		})
	}
}

// A server that ignores stopSig is killed once grace has passed, and stop says so.
func TestProcStopKills(t *testing.T) {
	p := &proc{title: "sleep", stopSig: syscall.SIGTERM, grace: 100 * time.Millisecond}
	// The ignored SIGTERM survives exec, so sleep ignores it too.
	if err := p.start(exec.Command("/bin/sh", "-c", `trap "" TERM; exec sleep 60`)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill() })
	pid := p.cmd.Process.Pid
	ignoresTerm := func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					return err
				}
				if mask&(1<<(syscall.SIGTERM-1)) != 0 {
					return nil
				}
			}
		}
		return errors.New("SIGTERM not ignored yet")
	}
	if err := p.awaitReady(30*time.Second, 10*time.Millisecond, ignoresTerm); err != nil {
		t.Fatal(err)
	}
	err := p.stop()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("stop = %v, want it killed", err)
	}
	if p.running() {
		t.Fatal("running after stop")
	}
	if err := p.stop(); err != nil {
		t.Fatalf("second stop = %v", err)
	}
}

// The sweep removes the directories of test binaries that are gone and only those; ownedTempDir records
// this one.
func TestSweepStale(t *testing.T) {
	prefix := fmt.Sprintf("warren-testenv-sweep-%d-", os.Getpid())
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stale) })
	if err := os.WriteFile(filepath.Join(stale, ownerFile), []byte(strconv.Itoa(gone.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	mine, err := ownedTempDir(prefix, os.RemoveAll) // sweeps first
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mine) })
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory of a gone test binary left: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mine, ownerFile)); err != nil || string(b) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("owner file %q, %v", b, err)
	}
	sweepStale(prefix, os.RemoveAll)
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("sweep removed the directory of a running test binary: %v", err)
	}
}

// killTree kills a process and its descendants, found through /proc, and leaves a pid that names another
// process alone.
func TestKillTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & sleep 300 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var kids []procID
	for deadline := time.Now().Add(10 * time.Second); len(kids) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("children of sh: %v, want the two sleeps", kids)
		}
		time.Sleep(10 * time.Millisecond)
		kids = children(cmd.Process.Pid)
	}
	_, start, ok := procStat(cmd.Process.Pid)
	if !ok {
		t.Fatal("no /proc stat of sh")
	}
	killTree(procID{cmd.Process.Pid, start + "0"}) // another process's start time: nothing happens
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)); err != nil || !strings.Contains(string(b), ") S ") {
		t.Fatalf("sh after killTree of another process: %q, %v; want it sleeping", b, err)
	}
	killTree(procID{cmd.Process.Pid, start})
	<-done
	for _, k := range kids {
		for deadline := time.Now().Add(10 * time.Second); ; {
			if _, _, ok := procStat(k.pid); !ok {
				break
			}
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k.pid)); strings.Contains(string(b), ") Z ") {
				break // killed, waiting for init to reap it
			}
			if time.Now().After(deadline) {
				t.Fatalf("child %d of sh outlived killTree", k.pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
