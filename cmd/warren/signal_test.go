package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/testenv"
)

// hangCatch only turns a hang into a failure: every wait here normally takes well under a second.
const hangCatch = 60 * time.Second

// The first SIGINT or SIGTERM starts warren dev's graceful shutdown; a second one during it ends the
// process at once with 128 + the signal's number and one line on stderr. A fresh connection that has
// not sent a whole request holds the graceful shutdown (http.Server.Shutdown waits about 5 s for it), so
// the second signal surely arrives while the first is still being handled.
func TestSecondSignalExits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary")
	}
	bin := testenv.WarrenBinary(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin, "dev", "-no-agent", "-insecure-no-sandbox", "-listen", "127.0.0.1:0",
				"-data-dir", t.TempDir(), "-log-level", "error")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderrR, stderrW := io.Pipe()
			cmd.Stderr = stderrW
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			gone := make(chan struct{})
			go func() {
				err := cmd.Wait()
				stderrW.Close()
				exited <- err
				close(gone)
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-gone
			})
			// stderr, line by line, for "shutting down" and the exit line.
			var (
				mu     sync.Mutex
				errOut bytes.Buffer
			)
			lines := make(chan string, 64)
			go func() {
				sc := bufio.NewScanner(stderrR)
				for sc.Scan() {
					mu.Lock()
					errOut.WriteString(sc.Text() + "\n")
					mu.Unlock()
					select {
					case lines <- sc.Text():
					default:
					}
				}
				close(lines)
			}()
			addr := edgeAddr(t, stdout)

			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")); err != nil {
				t.Fatal(err)
			}
			// The server has read the partial request once a complete one on a second connection is
			// answered (connections are served concurrently, so this only orders the accept).
			probe, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = probe.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
			_, _ = io.ReadAll(probe)
			probe.Close()

			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			waitLine(t, lines, "shutting down")
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("after a second %v: %v, want exit code %d; stderr:\n%s", tc.sig, err, tc.code, errOut.String())
				}
			case <-time.After(hangCatch):
				t.Fatalf("warren dev did not exit after a second %v", tc.sig)
			}
			for range lines { // the rest of stderr, up to its end
			}
			mu.Lock()
			defer mu.Unlock()
			if !strings.Contains(errOut.String(), "second "+tc.sig.String()) {
				t.Errorf("stderr does not say why it exited:\n%s", errOut.String())
			}
		})
	}
}

// edgeAddr reads warren dev's stdout up to the edge's address (and drains the rest).
func edgeAddr(t *testing.T, stdout io.Reader) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "edge" {
				select {
				case found <- strings.TrimPrefix(f[1], "http://"):
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatal("warren dev ended before printing the edge's address")
		}
		return addr
	case <-time.After(hangCatch):
		t.Fatal("warren dev did not print the edge's address")
	}
	return ""
}

// waitLine waits for a line containing want.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	deadline := time.After(hangCatch)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stderr ended before a line with %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q on stderr", want)
		}
	}
}
