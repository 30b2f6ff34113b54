package wire

import (
	"bytes"
	"encoding/json"
	"io"
)

// Terminals of the sandbox REST API (docs/PROTOCOL.md#terminals): an interactive program on a
// pseudo-terminal, created with POST /v1/sandbox/terminals and attached over a WebSocket. Like a background
// process it outlives the client's connection and ends with the sandbox.

// Bounds of terminals.
const (
	MaxTermCols = 1000 // columns of a terminal
	MaxTermRows = 1000 // rows of a terminal
	// MaxTermInput bounds one binary message of keyboard input (the WebSocket's read limit).
	MaxTermInput = 64 << 10
	// MaxTermControl bounds one text (control) message.
	MaxTermControl = 1024
)

// Control message types: resize goes from the client to the runner, exit from the runner to the client.
const (
	TermResize = "resize"
	TermExit   = "exit"
)

// TermCreateRequest is the body of POST /v1/sandbox/terminals. Without Command the terminal runs an
// interactive shell (bash when the sandbox has it, else sh); with Command it means what it means for a
// background process. Cols and Rows default to 80 by 24.
type TermCreateRequest struct {
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cols    int               `json:"cols,omitempty"`
	Rows    int               `json:"rows,omitempty"`
}

// TermInfo describes one terminal.
type TermInfo struct {
	ID      string   `json:"id"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Cwd     string   `json:"cwd"`
	Status  string   `json:"status"` // running or exited (ProcRunning, ProcExited)
	// ExitCode is set once exited.
	ExitCode *int `json:"exitCode,omitempty"`
	// Ended says why it exited when the runner ended it: "killed" or "sandbox_stopped".
	Ended     string `json:"ended,omitempty"`
	StartedAt string `json:"startedAt"`
	EndedAt   string `json:"endedAt,omitempty"`
	Cols      int    `json:"cols"`
	Rows      int    `json:"rows"`
	// Attached counts the WebSocket clients attached now.
	Attached int `json:"attached"`
	// Output counts the bytes the program wrote so far; the last ones (at most the replay buffer) are
	// replayed to a client that attaches.
	Output int64 `json:"output"`
}

// TermList answers GET /v1/sandbox/terminals, oldest first.
type TermList struct {
	Terminals []TermInfo `json:"terminals"`
}

// TermControl is a text message on a terminal's WebSocket: {"type":"resize","cols":C,"rows":R} from the
// client, {"type":"exit","code":N} from the runner (the last message before it closes the connection).
type TermControl struct {
	Type string `json:"type"`
	Cols int    `json:"cols,omitempty"`
	Rows int    `json:"rows,omitempty"`
	Code *int   `json:"code,omitempty"`
}

// CheckTermSize refuses a size out of bounds.
func CheckTermSize(cols, rows int) error {
	if cols < 1 || cols > MaxTermCols || rows < 1 || rows > MaxTermRows {
		return Errorf(InvalidArgument, "terminal size %dx%d is out of bounds (columns 1 to %d, rows 1 to %d)",
			cols, rows, MaxTermCols, MaxTermRows).WithDetails(map[string]any{"maxCols": MaxTermCols, "maxRows": MaxTermRows})
	}
	return nil
}

// ParseTermControl reads and checks one control message: a known type, a size within bounds for resize,
// a code for exit. Errors are invalid_argument (payload_too_large past MaxTermControl).
func ParseTermControl(b []byte) (TermControl, error) {
	if len(b) > MaxTermControl {
		return TermControl{}, Errorf(PayloadTooLarge, "terminal control message exceeds %d bytes", MaxTermControl)
	}
	var c TermControl
	if err := DecodeStrict(bytes.TrimSpace(b), &c); err != nil {
		return TermControl{}, Errorf(InvalidArgument, "terminal control message is not valid: %v", err)
	}
	switch c.Type {
	case TermResize:
		if c.Code != nil {
			return TermControl{}, Errorf(InvalidArgument, "a resize message has no code")
		}
		if err := CheckTermSize(c.Cols, c.Rows); err != nil {
			return TermControl{}, err
		}
	case TermExit:
		if c.Code == nil || c.Cols != 0 || c.Rows != 0 {
			return TermControl{}, Errorf(InvalidArgument, "an exit message has a code and nothing else")
		}
	default:
		return TermControl{}, Errorf(InvalidArgument, "unknown terminal control message type %q", truncateForMessage(c.Type))
	}
	return c, nil
}

// DecodeTermCreate reads and bounds a create request (the bounds of a process start; a zero size is
// 80x24).
func DecodeTermCreate(r io.Reader) (TermCreateRequest, error) {
	var t TermCreateRequest
	if err := DecodeBody(r, "terminal request", &t); err != nil {
		return TermCreateRequest{}, err
	}
	if t.Command == "" && len(t.Args) > 0 {
		return TermCreateRequest{}, Errorf(InvalidArgument, "args need a command")
	}
	if t.Command != "" {
		b, _ := json.Marshal(ProcStartRequest{Command: t.Command, Args: t.Args, Env: t.Env})
		if _, err := DecodeProcStart(bytes.NewReader(b)); err != nil {
			return TermCreateRequest{}, err
		}
	} else if err := checkEnvBounds(t.Env); err != nil {
		return TermCreateRequest{}, err
	}
	if t.Cols == 0 && t.Rows == 0 {
		t.Cols, t.Rows = 80, 24
	}
	if err := CheckTermSize(t.Cols, t.Rows); err != nil {
		return TermCreateRequest{}, err
	}
	return t, nil
}

func checkEnvBounds(env map[string]string) error {
	n := 0
	for k, v := range env {
		n += len(k) + len(v) + 2
	}
	if len(env) > MaxProcEnv {
		return Errorf(InvalidArgument, "more than %d environment variables", MaxProcEnv)
	}
	if n > MaxProcEnvBytes {
		return Errorf(InvalidArgument, "environment exceeds %d bytes", MaxProcEnvBytes)
	}
	return nil
}
