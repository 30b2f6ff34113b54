package wire

// Sandbox REST shapes (docs/PROTOCOL.md#sandbox-api), shared by the runner that serves them, the edge that
// relays them and the SDK that calls them.

// ExecRequest is the body of POST /v1/sandbox/exec. With Args empty, Command is run by /bin/sh -c; with Args,
// Command is executed directly with those arguments.
type ExecRequest struct {
	Command   string            `json:"command"`
	Args      []string          `json:"args,omitempty"`
	Cwd       string            `json:"cwd,omitempty"` // relative to the workspace root
	Env       map[string]string `json:"env,omitempty"`
	Stdin     string            `json:"stdin,omitempty"`
	TimeoutMs int64             `json:"timeoutMs,omitempty"`
}

// ExecResult answers a synchronous exec. Truncated is set when an output stream hit the output cap.
type ExecResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exitCode"`
	DurationMs int64  `json:"durationMs"`
	Truncated  bool   `json:"truncated,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	// OOMKilled: the command was killed because the sandbox reached its memory limit (the quota's
	// max_memory_bytes); ExitCode is then 137.
	OOMKilled bool `json:"oomKilled,omitempty"`
}

// Server-sent event names of a streamed exec (Accept: text/event-stream). stdout and stderr events carry
// ExecChunk as data; exit carries ExecResult with empty Stdout/Stderr; error carries an Error.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"
	EventError  = "error"
)

// ExecChunk is the data of a stdout or stderr event.
type ExecChunk struct {
	Data string `json:"data"`
}

// FileInfo is one entry of GET /v1/sandbox/files/list.
type FileInfo struct {
	Name    string `json:"name"`
	Path    string `json:"path"` // relative to the workspace root, slash-separated
	Type    string `json:"type"` // file, dir, symlink, other
	Size    int64  `json:"size"`
	Mode    string `json:"mode"`
	ModTime string `json:"modTime"` // RFC 3339
}

// FileList answers GET /v1/sandbox/files/list.
type FileList struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

// FileWritten answers PUT /v1/sandbox/files.
type FileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}
