package warren

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// Terminals (docs/PROTOCOL.md#terminals).
type (
	TerminalRequest = wire.TermCreateRequest
	TerminalInfo    = wire.TermInfo
)

func termPath(id, action string) string {
	p := "/v1/sandbox/terminals/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// CreateTerminal starts a program (by default an interactive shell) on a pseudo-terminal in the sandbox.
// It runs on after the call returns and after every client detaches, until it exits, is killed, or the
// sandbox stops. Attach to talk to it.
func (s *Sandbox) CreateTerminal(ctx context.Context, req TerminalRequest) (*TerminalInfo, error) {
	var in TerminalInfo
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandbox/terminals", nil, req, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// Terminals lists the sandbox's terminals, running and exited, oldest first.
func (s *Sandbox) Terminals(ctx context.Context) ([]TerminalInfo, error) {
	var l wire.TermList
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/terminals", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Terminals, nil
}

// Terminal describes one terminal.
func (s *Sandbox) Terminal(ctx context.Context, id string) (*TerminalInfo, error) {
	var in TerminalInfo
	if err := s.c.doJSON(ctx, http.MethodGet, termPath(id, ""), nil, nil, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// ResizeTerminal sets a terminal's size (what Resize does on an attached connection).
func (s *Sandbox) ResizeTerminal(ctx context.Context, id string, cols, rows int) (*TerminalInfo, error) {
	var in TerminalInfo
	body := map[string]int{"cols": cols, "rows": rows}
	if err := s.c.doJSON(ctx, http.MethodPost, termPath(id, "resize"), nil, body, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// KillTerminal kills a terminal's program (if it runs) and forgets the terminal.
func (s *Sandbox) KillTerminal(ctx context.Context, id string) error {
	return s.c.doJSON(ctx, http.MethodDelete, termPath(id, ""), nil, nil, nil)
}

// AttachTerminal connects to a terminal. Reads first return the output the terminal kept (its last 64 KiB),
// then what it writes from now on; writes are keyboard input (Ctrl-C is the byte 0x03). Several clients may
// attach to one terminal; detaching (Close) leaves it running.
func (s *Sandbox) AttachTerminal(ctx context.Context, id string) (*TerminalConn, error) {
	conn, err := s.c.dialWebSocket(ctx, termPath(id, "attach"))
	if err != nil {
		var we *Error
		if errors.As(err, &we) {
			return nil, err
		}
		return nil, fmt.Errorf("warren: attach terminal %s: %w", id, err)
	}
	// Output messages are at most 32 KiB; the limit leaves room.
	conn.SetReadLimit(wire.MaxTermInput)
	ctx, cancel := context.WithCancel(context.Background())
	return &TerminalConn{c: conn, ctx: ctx, cancel: cancel}, nil
}

// TerminalConn is a client attached to a terminal: an io.ReadWriteCloser of terminal bytes. Read returns
// io.EOF once the terminal exited (ExitCode then tells how) and the output before the exit was read.
// Read and Write may be called concurrently with each other, and Resize and Close with both.
type TerminalConn struct {
	c      *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc

	rmu     sync.Mutex // one reader
	pending []byte
	rerr    error

	wmu      sync.Mutex // keeps Write's chunks together
	mu       sync.Mutex
	exitCode *int
}

// Read reads terminal output.
func (t *TerminalConn) Read(p []byte) (int, error) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	for len(t.pending) == 0 {
		if t.rerr != nil {
			return 0, t.rerr
		}
		typ, b, err := t.c.Read(t.ctx)
		if err != nil {
			t.rerr = t.endError(err)
			continue
		}
		if typ == websocket.MessageBinary {
			t.pending = b
			continue
		}
		ctl, err := wire.ParseTermControl(b)
		if err != nil {
			t.rerr = fmt.Errorf("warren: terminal control message: %w", err)
			continue
		}
		if ctl.Type == wire.TermExit {
			t.mu.Lock()
			t.exitCode = ctl.Code
			t.mu.Unlock()
		}
	}
	n := copy(p, t.pending)
	t.pending = t.pending[n:]
	return n, nil
}

// endError is what Read returns once the connection ended: io.EOF after an exit message or a normal close,
// the *Error of the close otherwise.
func (t *TerminalConn) endError(err error) error {
	if status := websocket.CloseStatus(err); status != -1 {
		var ce websocket.CloseError
		errors.As(err, &ce)
		if e := closeError(int(status), ce.Reason, nil); e != nil {
			return e
		}
		return io.EOF
	}
	t.mu.Lock()
	exited := t.exitCode != nil
	t.mu.Unlock()
	if exited {
		return io.EOF
	}
	return fmt.Errorf("warren: terminal connection: %w", err)
}

// Write sends keyboard input, in messages of at most 64 KiB.
func (t *TerminalConn) Write(p []byte) (int, error) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), wire.MaxTermInput)]
		if err := t.c.Write(t.ctx, websocket.MessageBinary, chunk); err != nil {
			return n, fmt.Errorf("warren: terminal input: %w", err)
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// Resize sets the terminal's size; the program gets SIGWINCH.
func (t *TerminalConn) Resize(cols, rows int) error {
	if err := wire.CheckTermSize(cols, rows); err != nil {
		return err
	}
	b, _ := json.Marshal(wire.TermControl{Type: wire.TermResize, Cols: cols, Rows: rows})
	if err := t.c.Write(t.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("warren: terminal resize: %w", err)
	}
	return nil
}

// ExitCode is the terminal's exit status once Read has returned io.EOF after its exit; ok is false before,
// or when the connection ended otherwise.
func (t *TerminalConn) ExitCode() (code int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exitCode == nil {
		return 0, false
	}
	return *t.exitCode, true
}

// Close detaches; the terminal keeps running.
func (t *TerminalConn) Close() error {
	_ = t.c.Close(websocket.StatusNormalClosure, "") // fails when the connection already ended: nothing to do
	t.cancel()
	return nil
}
