package runner

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/warren-mesh/warren/internal/blob"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/runner/tasks"
)

// One-shot tasks are runner/tasks; these are its types and functions under the names the runner's callers
// (cmd/warren, the tests, the billing role) know.

// TaskConfig configures one-shot tasks (Config.Tasks); zero values take the defaults.
type TaskConfig = tasks.Options

// Task defaults.
const (
	DefaultMaxActiveTasks = tasks.DefaultMaxActiveTasks
	DefaultTaskTimeout    = tasks.DefaultTaskTimeout
	DefaultMaxTaskTimeout = tasks.DefaultMaxTaskTimeout
	DefaultTasksKept      = tasks.DefaultTasksKept
)

// The task's wire types (docs/PROTOCOL.md#tasks).
type (
	Task           = tasks.Task
	FileChange     = tasks.FileChange
	WebhookStatus  = tasks.WebhookStatus
	ExecuteRequest = tasks.ExecuteRequest
	TaskList       = tasks.TaskList
)

// Webhook headers and bounds (tasks.HeaderWebhookID ...).
const (
	HeaderWebhookID        = tasks.HeaderWebhookID
	HeaderWebhookTimestamp = tasks.HeaderWebhookTimestamp
	HeaderWebhookSignature = tasks.HeaderWebhookSignature
	MaxWebhookURL          = tasks.MaxWebhookURL
)

// WebhookSecret is tasks.WebhookSecret: the secret an issuer verifies its task webhooks with.
func WebhookSecret(master []byte, issuer string) string { return tasks.WebhookSecret(master, issuer) }

// SignWebhook is tasks.SignWebhook: the signature header's value for body sent at ts.
func SignWebhook(secret string, ts int64, body []byte) string {
	return tasks.SignWebhook(secret, ts, body)
}

// CheckWebhookURL is tasks.CheckWebhookURL: a webhook URL validated before a task is accepted.
func CheckWebhookURL(raw string, allowPrivate bool) (*url.URL, error) {
	return tasks.CheckWebhookURL(raw, allowPrivate)
}

// ReadWebhookMaster is tasks.ReadWebhookMaster: the operator's webhook secret read from its file.
func ReadWebhookMaster(path string) ([]byte, error) { return tasks.ReadWebhookMaster(path) }

var errTaskStore = errors.New("task store")

// openTaskStore is where tasks are kept: the snapshot store under the sandbox's prefix, else a directory
// store in the state directory (or beside the workspace without one).
func (r *Runner) openTaskStore() (blob.Store, string, error) {
	if r.cfg.Snapshots != nil {
		return r.cfg.Snapshots, r.cfg.SnapshotPrefix, nil
	}
	dir := r.cfg.StateDir
	if dir == "" {
		dir = r.cfg.Workspace + ".state" // beside the workspace, as the usage spool
	}
	st, err := blobfs.New(filepath.Join(dir, "tasks"))
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errTaskStore, err)
	}
	return st, "local", nil
}
