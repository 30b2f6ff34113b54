package wire

import "time"

// Task statuses (docs/PROTOCOL.md#tasks).
const (
	TaskQueued    = "queued"
	TaskRunning   = "running"
	TaskSucceeded = "succeeded"
	TaskFailed    = "failed"
)

// Webhook headers of a task's completion webhook (docs/PROTOCOL.md#tasks): the signature is "v1=" and the
// hex HMAC-SHA256, keyed with the issuer's webhook secret, of the timestamp header's value, ".", and the body.
const (
	HeaderWebhookID        = "Warren-Webhook-Id"
	HeaderWebhookTimestamp = "Warren-Webhook-Timestamp"
	HeaderWebhookSignature = "Warren-Webhook-Signature"
)

// TaskOf is a one-shot task (POST /v1/execute) as stored and answered, with the cost extension of its
// result as C (the runner's and the SDK's own cost types share the JSON shape).
type TaskOf[C any] struct {
	ID             string     `json:"id"`
	Status         string     `json:"status"`
	Prompt         string     `json:"prompt"`
	SessionID      string     `json:"sessionId,omitempty"`
	IdempotencyKey string     `json:"idempotencyKey,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	StartedAt      *time.Time `json:"startedAt,omitempty"`
	CompletedAt    *time.Time `json:"completedAt,omitempty"`
	// Result is the agent's final text; Subtype and NumTurns are its result event's.
	Result       string  `json:"result,omitempty"`
	Subtype      string  `json:"subtype,omitempty"`
	NumTurns     int     `json:"numTurns,omitempty"`
	Cost         *C      `json:"cost,omitempty"`
	TotalCostUSD float64 `json:"totalCostUsd"`
	// FilesChanged are the workspace paths created, modified or deleted while the task ran (by anything in
	// the sandbox), sorted, at most 1000; FilesChangedTruncated says some are missing.
	FilesChanged          []FileChange   `json:"filesChanged"`
	FilesChangedTruncated bool           `json:"filesChangedTruncated,omitempty"`
	Error                 *Error         `json:"error,omitempty"`
	Webhook               *WebhookStatus `json:"webhook,omitempty"`
}

// Done reports whether the task has finished (succeeded or failed).
func (t *TaskOf[C]) Done() bool { return t.Status == TaskSucceeded || t.Status == TaskFailed }

// FileChange is one workspace path a task changed.
type FileChange struct {
	Path   string `json:"path"`   // relative to the workspace, slash-separated
	Change string `json:"change"` // created, modified or deleted
}

// WebhookStatus is what became of a task's webhook.
type WebhookStatus struct {
	URL       string `json:"url"`
	Delivered bool   `json:"delivered"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError,omitempty"`
}
