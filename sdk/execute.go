package warren

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// Task statuses (docs/PROTOCOL.md#tasks).
const (
	TaskQueued    = wire.TaskQueued
	TaskRunning   = wire.TaskRunning
	TaskSucceeded = wire.TaskSucceeded
	TaskFailed    = wire.TaskFailed
)

// Task is a one-shot task: a prompt the agent ran (or runs) to completion in the user's sandbox, its final
// text, the files it changed, its cost, and its typed Error when it failed.
type Task = wire.TaskOf[Cost]

// FileChange is one workspace path a task changed; WebhookStatus what became of its webhook.
type (
	FileChange    = wire.FileChange
	WebhookStatus = wire.WebhookStatus
)

// ExecuteOptions are the optional parts of a task.
type ExecuteOptions struct {
	// Session are the options of the task's fresh session (as Dial's; SessionID, LastSeq, Role and
	// MCPServers are refused).
	Session *SessionOptions
	// Wait makes Execute return the finished task (it blocks until then); otherwise it returns at once
	// with the task queued or running.
	Wait bool
	// Timeout bounds the task's run (0: the deployment's default, 10 minutes unless configured).
	Timeout time.Duration
	// WebhookURL, when set, is POSTed the finished task, signed (VerifyWebhook).
	WebhookURL string
	// IdempotencyKey makes a retry of the same request return the same task instead of running it again.
	IdempotencyKey string
}

type executeBody struct {
	Prompt    string          `json:"prompt"`
	Options   *SessionOptions `json:"options,omitempty"`
	Wait      bool            `json:"wait,omitempty"`
	TimeoutMs int64           `json:"timeoutMs,omitempty"`
	Webhook   *struct {
		URL string `json:"url"`
	} `json:"webhook,omitempty"`
}

// Execute runs prompt as a one-shot task (POST /v1/execute). A task the agent ended in error (say, over
// the budget) is returned with Status failed and its typed Error; a task that could not be accepted (the
// quota of queued tasks, an invalid request) is an error.
func (c *Client) Execute(ctx context.Context, prompt string, o *ExecuteOptions) (*Task, error) {
	if o == nil {
		o = &ExecuteOptions{}
	}
	body := executeBody{Prompt: prompt, Options: o.Session, Wait: o.Wait, TimeoutMs: o.Timeout.Milliseconds()}
	if o.WebhookURL != "" {
		body.Webhook = &struct {
			URL string `json:"url"`
		}{o.WebhookURL}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("warren: encode task: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint("/v1/execute", nil), bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if o.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", o.IdempotencyKey)
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var t Task
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return nil, fmt.Errorf("warren: decode task: %w", err)
	}
	return &t, nil
}

// Task fetches a task of the user by id (GET /v1/execute/{id}); an unknown id (or another user's) is an
// *Error with code not_found.
func (c *Client) Task(ctx context.Context, id string) (*Task, error) {
	var t Task
	if err := c.doJSON(ctx, http.MethodGet, "/v1/execute/"+url.PathEscape(id), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Tasks lists the user's newest tasks first (GET /v1/execute; limit 0 is the server's default of 20, at
// most 100).
func (c *Client) Tasks(ctx context.Context, limit int) ([]Task, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out struct {
		Tasks []Task `json:"tasks"`
	}
	if err := c.doJSON(ctx, http.MethodGet, "/v1/execute", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Tasks, nil
}

// Webhook headers of a task's completion webhook.
const (
	HeaderWebhookID        = wire.HeaderWebhookID
	HeaderWebhookTimestamp = wire.HeaderWebhookTimestamp
	HeaderWebhookSignature = wire.HeaderWebhookSignature
)

// ErrWebhookSignature is returned by VerifyWebhook for a webhook that is not authentic or too old.
var ErrWebhookSignature = errors.New("warren: webhook signature invalid")

// VerifyWebhook checks a task webhook's signature with the issuer's webhook secret: the signature header
// must be "v1=" and the hex HMAC-SHA256 of the timestamp header, ".", and body, and the timestamp within
// tolerance of now (0: 5 minutes), which bounds replays. It returns the task the body carries.
func VerifyWebhook(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) (*Task, error) {
	if tolerance <= 0 {
		tolerance = 5 * time.Minute
	}
	tsHeader := h.Get(HeaderWebhookTimestamp)
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: bad timestamp", ErrWebhookSignature)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return nil, fmt.Errorf("%w: timestamp outside the tolerance", ErrWebhookSignature)
	}
	sig, ok := strings.CutPrefix(h.Get(HeaderWebhookSignature), "v1=")
	got, err := hex.DecodeString(sig)
	if !ok || err != nil {
		return nil, fmt.Errorf("%w: malformed signature", ErrWebhookSignature)
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(tsHeader))
	m.Write([]byte("."))
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return nil, ErrWebhookSignature
	}
	var t Task
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, fmt.Errorf("warren: webhook body: %w", err)
	}
	return &t, nil
}
