package wire

import (
	"io"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"
)

// Background processes of the sandbox REST API (docs/PROTOCOL.md#processes): started with POST
// /v1/sandbox/procs, they outlive the request and the client's connection and end with the sandbox.

// Bounds of a process request. They keep a start within what Linux lets a command line and an environment
// hold, so what is accepted starts.
const (
	MaxProcBody       = 1 << 20  // the JSON body of a start or wait request
	MaxProcCommand    = 64 << 10 // bytes of command
	MaxProcArgs       = 1024     // arguments
	MaxProcArgBytes   = 256 << 10
	MaxProcEnv        = 128 // variables
	MaxProcEnvBytes   = 256 << 10
	MaxProcPattern    = 1024 // bytes of a log pattern
	MaxProcStdinWrite = 1 << 20
)

// ProcStartRequest is the body of POST /v1/sandbox/procs. With Args empty, Command is run by /bin/sh -c;
// with Args it is executed directly, as exec does.
type ProcStartRequest struct {
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Cwd     string            `json:"cwd,omitempty"` // relative to the workspace root
	Env     map[string]string `json:"env,omitempty"`
}

// Process states.
const (
	ProcRunning = "running"
	ProcExited  = "exited"
)

// ProcInfo describes one background process.
type ProcInfo struct {
	ID      string   `json:"id"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Cwd     string   `json:"cwd"`
	Status  string   `json:"status"` // running or exited
	// ExitCode is set once exited: the exit status, or 128+N when the process died of signal N.
	ExitCode *int `json:"exitCode,omitempty"`
	// Ended says why it exited when the runner ended it: "killed" (SIGKILL through the API) or
	// "sandbox_stopped" (the sandbox stopped or slept).
	Ended     string `json:"ended,omitempty"`
	StartedAt string `json:"startedAt"`         // RFC 3339
	EndedAt   string `json:"endedAt,omitempty"` // RFC 3339
	// LogStart and LogEnd are the offsets of the output kept: bytes of output (stdout and stderr
	// together, as UTF-8) before the first kept byte, and in all so far.
	LogStart    int64 `json:"logStart"`
	LogEnd      int64 `json:"logEnd"`
	StdinClosed bool  `json:"stdinClosed,omitempty"`
}

// ProcList answers GET /v1/sandbox/procs, oldest first.
type ProcList struct {
	Procs []ProcInfo `json:"procs"`
}

// ProcChunk is one piece of a process's output: the data of a stdout or stderr event of the logs stream,
// and an element of ProcLogs. Offset is the chunk's first byte in the process's output.
type ProcChunk struct {
	Stream string `json:"stream"` // stdout or stderr
	Offset int64  `json:"offset"`
	Data   string `json:"data"`
}

// ProcLogs answers GET /v1/sandbox/procs/{id}/logs without streaming: the kept output from the offset
// asked (or LogStart, when that is older than what is kept) up to Next.
type ProcLogs struct {
	Start  int64       `json:"start"`
	Next   int64       `json:"next"`
	Chunks []ProcChunk `json:"chunks"`
}

// ProcSignalRequest is the body of POST /v1/sandbox/procs/{id}/signal.
type ProcSignalRequest struct {
	Signal string `json:"signal"`
}

// Signals a client may send, by name without "SIG".
var procSignals = []string{"HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "CONT", "STOP", "WINCH"}

// ProcSignals lists the signals a client may send.
func ProcSignals() []string { return slices.Clone(procSignals) }

// ParseSignal accepts a signal of ProcSignals by name, with or without "SIG", in any case, and returns its
// canonical name; anything else is invalid_argument.
func ParseSignal(name string) (string, error) {
	n := strings.ToUpper(name)
	n = strings.TrimPrefix(n, "SIG")
	if !slices.Contains(procSignals, n) {
		return "", Errorf(InvalidArgument, "signal %q is not one of %s", truncateForMessage(name), strings.Join(procSignals, ", "))
	}
	return n, nil
}

// What a wait waits for.
const (
	WaitExit = "exit"
	WaitPort = "port"
	WaitLog  = "log"
)

// ProcWaitRequest is the body of POST /v1/sandbox/procs/{id}/wait: wait until the process exits, until a
// TCP port listens in the sandbox, or until a line of its output contains Pattern (a substring, or with
// Regex an RE2 regular expression), searching from Offset. TimeoutMs 0 takes the runner's default.
type ProcWaitRequest struct {
	For       string `json:"for"`
	Port      int    `json:"port,omitempty"`
	Pattern   string `json:"pattern,omitempty"`
	Regex     bool   `json:"regex,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"`
}

// ProcWaitResult answers a wait that was satisfied: the process as it is then and, for a log wait, the line
// that matched (at most MaxProcLine bytes of it) and its offset.
type ProcWaitResult struct {
	Proc   ProcInfo `json:"proc"`
	Line   string   `json:"line,omitempty"`
	Offset int64    `json:"offset,omitempty"`
}

// MaxProcLine bounds a line a log wait matches against; a longer line is matched in pieces of this size.
const MaxProcLine = 64 << 10

// DecodeBody reads one JSON object of at most MaxProcBody bytes from r into v (DecodeStrict: no unknown
// fields, no trailing data); failures are payload_too_large or invalid_argument naming what.
func DecodeBody(r io.Reader, what string, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, MaxProcBody+1))
	if err != nil {
		return Wrap(InvalidArgument, err, what+" could not be read")
	}
	if len(b) > MaxProcBody {
		return Errorf(PayloadTooLarge, "%s exceeds %d bytes", what, MaxProcBody)
	}
	if err := DecodeStrict(b, v); err != nil {
		return JSONError(err, what+" is not valid")
	}
	return nil
}

// DecodeProcStart reads and bounds a start request. It checks shapes and sizes; the runner checks the
// working directory and the environment's names.
func DecodeProcStart(r io.Reader) (ProcStartRequest, error) {
	var p ProcStartRequest
	if err := DecodeBody(r, "process start request", &p); err != nil {
		return ProcStartRequest{}, err
	}
	argBytes := 0
	for _, a := range p.Args {
		argBytes += len(a) + 1
	}
	envBytes := 0
	for k, v := range p.Env {
		envBytes += len(k) + len(v) + 2
	}
	var err error
	switch {
	case p.Command == "":
		err = Errorf(InvalidArgument, "command is required")
	case len(p.Command) > MaxProcCommand:
		err = Errorf(InvalidArgument, "command exceeds %d bytes", MaxProcCommand)
	case len(p.Args) > MaxProcArgs:
		err = Errorf(InvalidArgument, "more than %d arguments", MaxProcArgs)
	case argBytes > MaxProcArgBytes:
		err = Errorf(InvalidArgument, "arguments exceed %d bytes", MaxProcArgBytes)
	case len(p.Env) > MaxProcEnv:
		err = Errorf(InvalidArgument, "more than %d environment variables", MaxProcEnv)
	case envBytes > MaxProcEnvBytes:
		err = Errorf(InvalidArgument, "environment exceeds %d bytes", MaxProcEnvBytes)
	}
	if err != nil {
		return ProcStartRequest{}, err
	}
	return p, nil
}

// DecodeProcWait reads and checks a wait request. A log wait's pattern is compiled here, so a bad one is
// refused before anything waits; the compiled matcher is returned (nil for other waits).
func DecodeProcWait(r io.Reader) (ProcWaitRequest, func(string) bool, error) {
	var w ProcWaitRequest
	if err := DecodeBody(r, "wait request", &w); err != nil {
		return ProcWaitRequest{}, nil, err
	}
	fail := func(format string, a ...any) (ProcWaitRequest, func(string) bool, error) {
		return ProcWaitRequest{}, nil, Errorf(InvalidArgument, format, a...)
	}
	if w.TimeoutMs < 0 {
		return fail("timeoutMs must not be negative")
	}
	if w.Offset < 0 {
		return fail("offset must not be negative")
	}
	switch w.For {
	case WaitExit:
		if w.Port != 0 || w.Pattern != "" || w.Regex {
			return fail("a wait for exit takes no port or pattern")
		}
		return w, nil, nil
	case WaitPort:
		if w.Port < 1 || w.Port > 65535 {
			return fail("port must be 1 to 65535")
		}
		if w.Pattern != "" || w.Regex {
			return fail("a wait for a port takes no pattern")
		}
		return w, nil, nil
	case WaitLog:
		if w.Port != 0 {
			return fail("a wait for a log line takes no port")
		}
		if w.Pattern == "" || len(w.Pattern) > MaxProcPattern || !utf8.ValidString(w.Pattern) {
			return fail("pattern must be 1 to %d bytes of UTF-8", MaxProcPattern)
		}
		if !w.Regex {
			pat := w.Pattern
			return w, func(line string) bool { return strings.Contains(line, pat) }, nil
		}
		parsed, err := syntax.Parse(w.Pattern, syntax.Perl)
		if err != nil {
			return fail("pattern is not a valid regular expression: %v", err)
		}
		// The runner matches every line of the output with it, outside the sandbox: RE2 is linear in the
		// line but proportional to the program's size too ([a-z]{1000}b takes seconds a 64 KiB line).
		// Measured before compiling, which expands counted repetitions.
		if n := regexCost(parsed); n > MaxProcRegexCost {
			return fail("pattern is too costly: about %d instructions, at most %d (counted repetitions multiply; a plain pattern has no limit)", min(n, 1<<30), MaxProcRegexCost)
		}
		re, err := regexp.Compile(w.Pattern)
		if err != nil {
			return fail("pattern is not a valid regular expression: %v", err)
		}
		return w, re.MatchString, nil
	default:
		return fail("for must be %q, %q or %q", WaitExit, WaitPort, WaitLog)
	}
}

// MaxProcRegexCost bounds the size of a log wait's regular expression, in about compiled instructions
// (regexCost): matching costs up to this many steps a byte of output.
const MaxProcRegexCost = 256

// regexCost estimates the instructions re compiles to, counted repetitions expanded; it saturates instead
// of overflowing.
func regexCost(re *syntax.Regexp) int {
	sat := func(n int) int { return min(n, 1<<30) }
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune)
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return sat(regexCost(re.Sub[0]) + 2)
	case syntax.OpRepeat:
		n := re.Max
		if n < 0 {
			n = re.Min + 1
		}
		return sat(max(n, 1)*regexCost(re.Sub[0]) + 1)
	case syntax.OpConcat, syntax.OpAlternate:
		total := 1
		for _, sub := range re.Sub {
			total = sat(total + regexCost(sub))
		}
		return total
	}
	return 1
}

// truncateForMessage keeps a client's value short and printable inside an error message.
func truncateForMessage(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.ToValidUTF8(s, "?")
}
