package wire

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/warren-mesh/warren/internal/strictjson"
)

// HeaderGrant carries a Grant from the edge to a runner on every internal request. Runners trust it only
// because the request also carries their bearer key, which only the edge holds.
const HeaderGrant = "X-Warren-Grant"

// Grant is what the edge admitted: whose sandbox, which budget window is charged, the limits of that window
// and the token's permissions and sdkConfig (docs/PROTOCOL.md#tokens), which override client session options.
type Grant struct {
	Issuer      string    `json:"iss"`
	User        string    `json:"sub"`
	Window      string    `json:"window"`
	WindowStart time.Time `json:"windowStart,omitzero"`
	// WindowAnchor is the token's own windowStart: the window rolls over from it (billing.CurrentWindowStart),
	// so a connection that outlives its window charges the next one. Zero: WindowStart is fixed.
	WindowAnchor   time.Time       `json:"windowAnchor,omitzero"`
	AIMicros       int64           `json:"ai"`      // limit for the window; < 0 unlimited
	ComputeSeconds int64           `json:"compute"` // limit for the window; < 0 unlimited
	Permissions    json.RawMessage `json:"permissions,omitempty"`
	SDKConfig      json.RawMessage `json:"sdkConfig,omitempty"`
	// Limits are the sandbox's hard limits from the user's effective quota; nil: the runner's defaults.
	Limits *SandboxLimits `json:"limits,omitempty"`
}

// SandboxLimits are the hard resource limits of one user's sandbox, from the quota (issuer default, then
// the user's override). In every field 0 means "not set" (the runner's default applies) and -1 means
// unlimited; the runner enforces them (cgroups, tmpfs sizes, a semaphore, the snapshot store) and refuses
// what exceeds them with resource_exhausted.
type SandboxLimits struct {
	// Processes caps the tasks (processes and threads) alive in the sandbox at once (cgroup pids.max).
	Processes int64 `json:"processes,omitempty"`
	// MemoryBytes caps the sandbox's memory (cgroup memory limit); a command over it is killed.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// CPUMillis caps the sandbox's CPU time in thousandths of a core (1000 = one core; cgroup CFS quota).
	CPUMillis int64 `json:"cpuMillis,omitempty"`
	// TmpBytes caps each command's private /tmp (a sized tmpfs).
	TmpBytes int64 `json:"tmpBytes,omitempty"`
	// WorkspaceBytes caps the bytes stored under /workspace.
	WorkspaceBytes int64 `json:"workspaceBytes,omitempty"`
	// ConcurrentExecs caps the commands (exec requests) running at once.
	ConcurrentExecs int64 `json:"concurrentExecs,omitempty"`
	// StoredBytes caps the bytes the user's snapshots keep in the blob store.
	StoredBytes int64 `json:"storedBytes,omitempty"`
	// BackgroundProcesses caps the background processes running at once (-1: the runner's hard ceiling).
	BackgroundProcesses int64 `json:"backgroundProcesses,omitempty"`
	// ProcessLogBytes caps the output kept of each background process started from now on (never -1: the
	// billing API refuses it; the runner reads a negative value as not set).
	ProcessLogBytes int64 `json:"processLogBytes,omitempty"`
	// FileWatches caps the file watch subscribers at once (-1: the runner's hard ceiling).
	FileWatches int64 `json:"fileWatches,omitempty"`
	// Terminals caps the terminals running at once (-1: the runner's hard ceiling).
	Terminals int64 `json:"terminals,omitempty"`
	// Tasks caps the one-shot tasks queued or running at once (-1: the runner's hard ceiling).
	Tasks int64 `json:"tasks,omitempty"`
	// PreviewURLs caps the user's live preview URLs; the edge enforces it, not the runner (-1: the edge's
	// hard ceiling).
	PreviewURLs int64 `json:"previewUrls,omitempty"`
}

// Encode is the header value: base64url of the JSON.
func (g Grant) Encode() string {
	b, _ := json.Marshal(g)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeGrant parses a header value.
func DecodeGrant(s string) (Grant, error) {
	var g Grant
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return g, Errorf(InvalidArgument, "grant header is not base64url")
	}
	if err := strictjson.Unmarshal(b, &g); err != nil {
		return Grant{}, JSONError(err, "grant header")
	}
	return g, nil
}
