package claude

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/isolate"
)

const (
	// MaxLine bounds one line of the CLI's stdout; a longer line is dropped (and logged), never buffered.
	MaxLine = 8 << 20
	// stderrTail is how much of the end of stderr is kept to explain an exit.
	stderrTail = 2 << 10
	// stderrLogLines is how many stderr lines per process are logged; the rest is only kept in the tail.
	stderrLogLines = 50
	// lineQueue is how many stdout lines may wait for a turn to consume them; beyond that the CLI blocks on
	// its stdout, which is the flow control a flooding CLI gets.
	lineQueue = 64
)

// cliProc is one running CLI process with its reader goroutines. Lines of stdout arrive on lines, which is
// closed when stdout ends (the process exited or was killed).
type cliProc struct {
	p     *isolate.Process
	log   *slog.Logger
	lines chan []byte
	stop  chan struct{} // closed by close: readers stop delivering
	once  sync.Once
	wg    sync.WaitGroup

	tailMu sync.Mutex
	tail   []byte

	writeMu sync.Mutex // one line at a time on stdin: turns and tool call answers write concurrently
	bridge  *mcpBridge // answers the CLI's mcp_message requests for client tools

	killedFor atomic.Pointer[error] // why Config.Watch ended the process, if it did
}

// kill ends the process for cause (Config.Watch's verdict), which its exit reason then names.
func (c *cliProc) kill(cause error) {
	c.killedFor.CompareAndSwap(nil, &cause)
	_ = c.p.Kill()
}

// startCLI starts the CLI in the sandbox; lifetime ends the process when it is cancelled. servers are the
// session's MCP servers: the client tool servers among them are answered by the process's bridge.
func startCLI(lifetime context.Context, sb *isolate.Sandbox, spec isolate.ProcessSpec, servers []wire.MCPServer, log *slog.Logger) (*cliProc, error) {
	p, err := sb.Start(lifetime, spec)
	if err != nil {
		return nil, err
	}
	c := &cliProc{p: p, log: log.With("pid", p.Pid()), lines: make(chan []byte, lineQueue), stop: make(chan struct{})}
	c.bridge = newMCPBridge(servers, func(line []byte) error { return c.write(line, bridgeWriteTimeout) }, c.log)
	c.wg.Go(c.readStdout)
	c.wg.Go(c.readStderr)
	return c, nil
}

// readStdout delivers each non-empty line of stdout (without its newline) to lines. A line longer than
// MaxLine is discarded as it streams in.
func (c *cliProc) readStdout() {
	defer close(c.lines)
	r := bufio.NewReaderSize(c.p.Stdout, 64<<10)
	for {
		line, dropped, err := readLine(r, MaxLine)
		if dropped > 0 {
			c.log.Warn("agent output line too long; dropped", "bytes", dropped, "max", MaxLine)
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			select {
			case c.lines <- line:
			case <-c.stop:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				c.log.Debug("agent stdout ended", "err", err)
			}
			return
		}
	}
}

// readLine reads one line of at most max bytes. A longer line is consumed and discarded: line is nil and
// dropped is its length.
func readLine(r *bufio.Reader, max int) (line []byte, dropped int, err error) {
	n := 0
	for {
		frag, err := r.ReadSlice('\n')
		n += len(frag)
		if n > max+1 { // +1: the newline itself does not count
			line = nil
		} else {
			line = append(line, frag...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n > max+1 {
			return nil, n, err
		}
		return line, 0, err
	}
}

// readStderr logs the first lines of stderr and keeps its tail.
func (c *cliProc) readStderr() {
	r := bufio.NewReaderSize(c.p.Stderr, 4<<10)
	logged := 0
	for {
		line, dropped, err := readLine(r, 4<<10)
		if dropped > 0 {
			line = []byte("[long stderr line dropped]")
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			c.tailMu.Lock()
			c.tail = append(c.tail, line...)
			c.tail = append(c.tail, '\n')
			if len(c.tail) > stderrTail {
				c.tail = append([]byte(nil), c.tail[len(c.tail)-stderrTail:]...)
			}
			c.tailMu.Unlock()
			switch {
			case logged < stderrLogLines:
				c.log.Debug("agent stderr", "line", string(line))
			case logged == stderrLogLines:
				c.log.Debug("agent stderr: further lines not logged")
			}
			logged++
		}
		if err != nil {
			return
		}
	}
}

// stderrLast is the last non-empty line of stderr, shortened to fit a message.
func (c *cliProc) stderrLast() string {
	c.tailMu.Lock()
	defer c.tailMu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(c.tail)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 300 {
		last = last[:300] + "…"
	}
	return strings.ToValidUTF8(last, "\uFFFD")
}

func (c *cliProc) stderrTail() string {
	c.tailMu.Lock()
	defer c.tailMu.Unlock()
	return string(c.tail)
}

// control answers a control_request line of the CLI: mcp_message goes to the bridge; requests for the other
// features of an SDK host (permission prompts, hooks) are refused, since Warren configures none of them,
// rather than leave the CLI waiting.
func (c *cliProc) control(line []byte, ev event, log *slog.Logger) {
	if ev.Request.Subtype == "mcp_message" {
		c.bridge.handle(line)
		return
	}
	if err := c.write(controlError(truncate(ev.RequestID, maxRequestID), "not supported by this host"), time.Second); err != nil {
		log.Debug("cannot answer the agent's control request", "err", err)
	}
}

// write writes one line to stdin, giving up after timeout (a CLI that stopped reading).
func (c *cliProc) write(line []byte, timeout time.Duration) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.exited() {
		// Its stdin may still be open in another process of the sandbox: nobody would read the line.
		return errors.New("the agent process has exited")
	}
	if err := c.p.Stdin.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := c.p.Stdin.Write(append(line, '\n'))
	return err
}

// exited reports whether the process has ended.
func (c *cliProc) exited() bool {
	select {
	case <-c.p.Done():
		return true
	default:
		return false
	}
}

// exitReason describes how the process ended, with the last line of stderr when there is one.
func (c *cliProc) exitReason() string {
	reason := c.p.ExitError()
	if reason == "" {
		reason = "running"
	}
	if why := c.killedFor.Load(); why != nil {
		reason = (*why).Error() + " (" + reason + ")"
	}
	if last := c.stderrLast(); last != "" {
		reason += ": " + last
	}
	return reason
}

// shutdown ends the process gracefully: end of input, up to grace for the CLI to finish writing its
// transcript and exit, then close.
func (c *cliProc) shutdown(grace time.Duration) {
	_ = c.p.Stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.p.Done():
	case <-t.C:
	}
	c.close()
}

// close kills the process tree, closes its pipes and waits for the readers. It is idempotent.
func (c *cliProc) close() {
	c.once.Do(func() {
		close(c.stop)
		_ = c.p.Close()
		c.wg.Wait()
	})
}
