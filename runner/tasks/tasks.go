// Package tasks is the sandbox's one-shot tasks (POST /v1/execute, docs/PROTOCOL.md#tasks): the prompt as
// the one turn of a fresh session of the agent channel's hub, through an in-process connection (conn.go);
// the record in the blob store, idempotency keys (compare-and-set), the per-user quota, the files changed
// (changes.go), the signed, retried, SSRF-guarded webhook (webhook.go). Its Host gives the quota's limit,
// the newest grant and the hub.
package tasks

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/modelproxy"
	"github.com/warren-mesh/warren/runner/session"
)

// Options configures one-shot tasks (POST /v1/execute, docs/PROTOCOL.md#tasks): the operator's choices,
// runner.Config.Tasks. Zero values take the defaults.
type Options struct {
	// MaxActive caps the user's tasks queued or running at once (default 4); one more is refused with
	// concurrency_limit. Concurrency is how many of them run at once (default 1), the others wait in order.
	MaxActive   int
	Concurrency int
	// DefaultTimeout applies when a request gives no timeoutMs (default 10m); MaxTimeout caps what a
	// request may ask for (default 30m). A task over its time is interrupted and fails with timeout.
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// Keep is how many finished tasks the store keeps for the user (default 1000); older ones are deleted
	// after a task finishes.
	Keep int
	// WebhookSecret is the operator's secret; each issuer's webhooks are signed with
	// WebhookSecret(WebhookSecret, issuer). Empty: a request with a webhook is refused.
	WebhookSecret []byte
	// WebhookAllowPrivate lets webhooks use http and reach loopback, private and link-local addresses
	// (development and tests only; the -webhook-allow-private flag).
	WebhookAllowPrivate bool
	// WebhookAttempts bounds the deliveries of one webhook (default 5); WebhookBackoff is the longest
	// wait before the second, doubling after (default 1s; jittered, internal/backoff).
	WebhookAttempts int
	WebhookBackoff  time.Duration
}

// Task defaults.
const (
	DefaultMaxActiveTasks  = 4
	DefaultTaskTimeout     = 10 * time.Minute
	DefaultMaxTaskTimeout  = 30 * time.Minute
	DefaultTasksKept       = 1000
	maxTaskRequest         = 1 << 20
	maxIdempotencyKey      = 255
	maxTaskList            = 100
	maxTaskListScan        = 10_000
	defaultWebhookAttempts = 5
)

func (c Options) withDefaults() Options {
	c.MaxActive = cmp.Or(max(c.MaxActive, 0), DefaultMaxActiveTasks)
	c.Concurrency = min(cmp.Or(max(c.Concurrency, 0), 1), c.MaxActive)
	c.DefaultTimeout = cmp.Or(max(c.DefaultTimeout, 0), DefaultTaskTimeout)
	c.MaxTimeout = cmp.Or(max(c.MaxTimeout, 0), DefaultMaxTaskTimeout)
	c.DefaultTimeout = min(c.DefaultTimeout, c.MaxTimeout)
	c.Keep = cmp.Or(max(c.Keep, 0), DefaultTasksKept)
	c.WebhookAttempts = cmp.Or(max(c.WebhookAttempts, 0), defaultWebhookAttempts)
	c.WebhookBackoff = cmp.Or(max(c.WebhookBackoff, 0), time.Second)
	return c
}

// Cost is the Warren extension on every result of the agent channel (the runner's metering adds it); a
// task records its turn's.
type Cost struct {
	AIMicrodollars int64                            `json:"ai_microdollars"`
	ComputeSeconds float64                          `json:"compute_seconds"`
	Models         map[string]modelproxy.ModelUsage `json:"models"`
}

// Task is a one-shot task as stored and answered (docs/PROTOCOL.md#tasks).
type Task = wire.TaskOf[Cost]

// FileChange is one workspace path a task created, modified or deleted.
type FileChange = wire.FileChange

// WebhookStatus is what became of a task's webhook.
type WebhookStatus = wire.WebhookStatus

// ExecuteRequest is the body of POST /v1/execute.
type ExecuteRequest struct {
	Prompt string `json:"prompt"`
	// Options are session options as in init (docs/PROTOCOL.md#session-options), for the task's fresh
	// session: sessionId, resume, continue, lastSeq, role and mcpServers are refused.
	Options   json.RawMessage `json:"options,omitempty"`
	Wait      bool            `json:"wait,omitempty"`
	TimeoutMs int64           `json:"timeoutMs,omitempty"`
	Webhook   *struct {
		URL string `json:"url"`
	} `json:"webhook,omitempty"`
}

// Host is what tasks use of the runner. Its methods may be called concurrently.
type Host interface {
	// Limit is the tasks the user may have queued or running now (the quota's max_tasks, else def).
	Limit(def int) int
	// Grant is the newest grant the edge sent.
	Grant() wire.Grant
	// Hub is the agent channel's hub of the running Run: a task's turn is a session of it.
	Hub() *session.Hub
}

// Config is what the task table is built with.
type Config struct {
	Host    Host
	Options Options
	// Store and Prefix say where the records are kept ("<Prefix>/tasks/...").
	Store   blob.Store
	Prefix  string
	Logger  *slog.Logger
	Now     func() time.Time
	Metrics prometheus.Registerer
	// Workspace is listed before and after a task for the files it changed; Issuer's webhook secret signs
	// its webhooks.
	Workspace string
	Issuer    string
}

// Table holds the user's tasks in flight; records live in the blob store. Create it with New.
type Table struct {
	host   Host
	log    *slog.Logger
	now    func() time.Time
	ws     string // the workspace
	issuer string
	cfg    Options
	store  blob.Store
	prefix string // "<sandbox prefix>/tasks"
	hook   *http.Client
	sem    chan struct{}

	mu      sync.Mutex // guards live, active and the idempotency check-then-create
	live    map[string]*liveTask
	active  int
	pruneMu sync.Mutex

	taskCount *prometheus.CounterVec // warren_runner_tasks_total{outcome}
	hookCount *prometheus.CounterVec // warren_runner_task_webhooks_total{outcome}
}

type liveTask struct {
	mu   sync.Mutex
	t    Task
	done chan struct{}
}

func (l *liveTask) snapshot() Task {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.t
	return t
}

// New makes the task table and registers its metrics in c.Metrics.
func New(c Config) *Table {
	cfg := c.Options.withDefaults()
	tt := &Table{
		host: c.Host, log: c.Logger, now: c.Now, ws: c.Workspace, issuer: c.Issuer,
		cfg: cfg, store: c.Store, prefix: c.Prefix + "/tasks", hook: webhookClient(cfg.WebhookAllowPrivate),
		sem: make(chan struct{}, cfg.Concurrency), live: map[string]*liveTask{},
		taskCount: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_tasks_total",
			Help: "One-shot tasks (POST /v1/execute), by outcome: accepted, then succeeded or failed.",
		}, []string{"outcome"}),
		hookCount: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_task_webhooks_total",
			Help: "Task completion webhooks, by outcome (delivered, failed after its retries).",
		}, []string{"outcome"}),
	}
	c.Metrics.MustRegister(tt.taskCount, tt.hookCount,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_runner_tasks_active",
			Help: "One-shot tasks queued or running now.",
		}, func() float64 {
			tt.mu.Lock()
			defer tt.mu.Unlock()
			return float64(tt.active)
		}))
	return tt
}

// Busy reports whether a task is queued or running (it keeps the sandbox awake).
func (tt *Table) Busy(time.Time) bool {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return tt.active > 0
}

func (tt *Table) recordKey(id string) string { return tt.prefix + "/" + id + ".json" }
func (tt *Table) idemKey(key string) string {
	s := sha256.Sum256([]byte(key))
	return tt.prefix + "/idempotency/" + hex.EncodeToString(s[:])
}

// validTaskID: "t-" and 26 of [a-z2-7] (newTaskID), nothing else reaches the store.
func validTaskID(id string) bool {
	if len(id) != 28 || !strings.HasPrefix(id, "t-") {
		return false
	}
	for _, c := range id[2:] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func newTaskID() string { return "t-" + strings.ToLower(rand.Text()) }

func checkIdempotencyKey(k string) error {
	if len(k) > maxIdempotencyKey {
		return wire.Errorf(wire.InvalidArgument, "Idempotency-Key is longer than %d bytes", maxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return wire.Errorf(wire.InvalidArgument, "Idempotency-Key must be printable ASCII without spaces")
		}
	}
	return nil
}

// parseExecuteRequest decodes and validates a request body; opts is the init payload to open the task's
// session with.
func (tt *Table) parseExecuteRequest(body []byte) (ExecuteRequest, json.RawMessage, time.Duration, error) {
	var req ExecuteRequest
	if err := wire.DecodeStrict(body, &req); err != nil {
		return req, nil, 0, wire.JSONError(err, "request body")
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return req, nil, 0, wire.Errorf(wire.InvalidArgument, "prompt is required")
	}
	opts, err := wire.DecodeSessionOptions(req.Options)
	if err != nil {
		return req, nil, 0, err
	}
	switch {
	case opts.SessionID != "" || opts.Continue || opts.ResumeSessionAt != "" || opts.ForkSession:
		return req, nil, 0, wire.Errorf(wire.InvalidArgument, "a task runs in a fresh session: sessionId, resume and continue are not options of a task")
	case opts.LastSeq != nil || opts.Role != "":
		return req, nil, 0, wire.Errorf(wire.InvalidArgument, "lastSeq and role are not options of a task")
	case len(opts.MCPServers) > 0:
		return req, nil, 0, wire.Errorf(wire.InvalidArgument, "mcpServers are not options of a task: client tools need a live client")
	}
	raw, err := json.Marshal(opts)
	if err != nil {
		return req, nil, 0, wire.Wrap(wire.Internal, err, "encoding session options")
	}
	timeout := tt.cfg.DefaultTimeout
	if req.TimeoutMs < 0 {
		return req, nil, 0, wire.Errorf(wire.InvalidArgument, "timeoutMs must not be negative")
	}
	if req.TimeoutMs > 0 {
		if req.TimeoutMs > tt.cfg.MaxTimeout.Milliseconds() { // compared before converting: no overflow
			return req, nil, 0, wire.Errorf(wire.InvalidArgument, "timeoutMs exceeds the limit of %d", tt.cfg.MaxTimeout.Milliseconds())
		}
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	if req.Webhook != nil {
		if len(tt.cfg.WebhookSecret) == 0 {
			return req, nil, 0, wire.Errorf(wire.InvalidArgument, "webhooks are not configured on this deployment")
		}
		if _, err := CheckWebhookURL(req.Webhook.URL, tt.cfg.WebhookAllowPrivate); err != nil {
			return req, nil, 0, err
		}
	}
	return req, raw, timeout, nil
}

// fingerprint identifies what a request asks for (not whether it waits): a retry with the same
// Idempotency-Key must ask for the same.
func fingerprint(req ExecuteRequest, opts json.RawMessage, timeout time.Duration) string {
	hook := ""
	if req.Webhook != nil {
		hook = req.Webhook.URL
	}
	b, _ := json.Marshal([]any{req.Prompt, opts, timeout.Milliseconds(), hook})
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type idemRecord struct {
	Task        string `json:"task"`
	Fingerprint string `json:"fingerprint"`
}

// Close has nothing to wait for: queued and running tasks end with the runner's work (Serve.Work), and
// their records say so.
func (*Table) Close(context.Context) error { return nil }

// Routes mounts the task routes on s.
func (tt *Table) Routes(s web.Serve) {
	a := &api{t: tt, work: s.Work}
	s.Handle("/v1/execute", httpx.Methods{http.MethodPost: a.execute, http.MethodGet: a.listTasks})
	s.Handle("/v1/execute/{id}", httpx.Methods{http.MethodGet: a.getTask})
}

// api is the task routes of one Run.
type api struct {
	t    *Table
	work context.Context // the runner's work: tasks run as long as it
}

// execute serves POST /v1/execute.
func (a *api) execute(w http.ResponseWriter, req *http.Request) {
	tt := a.t
	body, err := io.ReadAll(io.LimitReader(req.Body, maxTaskRequest+1))
	if err != nil {
		web.Fail(w, req, wire.Wrap(wire.InvalidArgument, err, "reading the request body"))
		return
	}
	if len(body) > maxTaskRequest {
		web.Fail(w, req, wire.Errorf(wire.PayloadTooLarge, "request body exceeds %d bytes", maxTaskRequest))
		return
	}
	key := req.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		web.Fail(w, req, err)
		return
	}
	er, opts, timeout, err := tt.parseExecuteRequest(body)
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	g := tt.host.Grant()
	if h := req.Header.Get(wire.HeaderGrant); h != "" {
		if dg, err := wire.DecodeGrant(h); err == nil {
			g = dg
		}
	}
	lt, replayed, err := tt.create(req.Context(), er, opts, timeout, key, fingerprint(er, opts, timeout))
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		web.Logger(req).Info("task accepted", "task", lt.t.ID, "wait", er.Wait)
		go tt.run(a.work, lt, g, opts, timeout, er)
	}
	if er.Wait {
		select {
		case <-lt.done:
		case <-req.Context().Done():
			return // the task goes on; its record answers GET /v1/execute/{id}
		}
	}
	t := lt.snapshot()
	status := http.StatusAccepted
	if t.Done() {
		status = http.StatusOK
	}
	_ = httpx.WriteJSON(w, status, t)
}

// create makes the task, or finds the one an earlier request with the same idempotency key made
// (replayed). A task replayed from the store alone (an earlier runner made it) is returned as a done
// liveTask.
func (tt *Table) create(ctx context.Context, er ExecuteRequest, opts json.RawMessage, timeout time.Duration,
	key, fp string) (lt *liveTask, replayed bool, err error) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if key != "" {
		data, _, err := tt.store.Read(ctx, tt.idemKey(key))
		switch {
		case err == nil:
			var rec idemRecord
			if err := json.Unmarshal(data, &rec); err != nil || !validTaskID(rec.Task) {
				return nil, false, wire.Errorf(wire.Internal, "idempotency record of the key is corrupt")
			}
			if rec.Fingerprint != fp {
				return nil, false, wire.Errorf(wire.Conflict, "Idempotency-Key was used for a different request")
			}
			if l, ok := tt.live[rec.Task]; ok {
				return l, true, nil
			}
			t, err := tt.load(ctx, rec.Task)
			if err != nil {
				return nil, false, err
			}
			done := make(chan struct{})
			close(done)
			return &liveTask{t: t, done: done}, true, nil
		case !errors.Is(err, blob.ErrNotFound):
			return nil, false, wire.Wrap(wire.Unavailable, err, "the task store is unavailable")
		}
	}
	if limit := tt.host.Limit(tt.cfg.MaxActive); tt.active >= limit {
		return nil, false, wire.Errorf(wire.ConcurrencyLimit, "%d tasks are already queued or running; wait for one to finish (the quota's max_tasks, else the runner's -max-tasks)", tt.active).
			WithDetails(map[string]any{"limit": limit, "quota": "max_tasks"})
	}
	t := Task{ID: newTaskID(), Status: wire.TaskQueued, Prompt: er.Prompt, IdempotencyKey: key,
		CreatedAt: tt.now().UTC(), FilesChanged: []FileChange{}}
	if err := tt.save(ctx, t); err != nil {
		return nil, false, err
	}
	if key != "" {
		rec, _ := json.Marshal(idemRecord{Task: t.ID, Fingerprint: fp})
		if _, err := tt.store.PutIf(ctx, tt.idemKey(key), rec, ""); err != nil {
			_ = tt.store.Delete(context.WithoutCancel(ctx), tt.recordKey(t.ID))
			if errors.Is(err, blob.ErrPrecondition) {
				return nil, false, wire.Errorf(wire.Conflict, "Idempotency-Key is being used by another request; retry")
			}
			return nil, false, wire.Wrap(wire.Unavailable, err, "the task store is unavailable")
		}
	}
	lt = &liveTask{t: t, done: make(chan struct{})}
	tt.live[t.ID] = lt
	tt.active++
	tt.taskCount.WithLabelValues("accepted").Inc()
	return lt, false, nil
}

func (tt *Table) save(ctx context.Context, t Task) error {
	b, err := json.Marshal(t)
	if err != nil {
		return wire.Wrap(wire.Internal, err, "encoding task")
	}
	if err := tt.store.Put(ctx, tt.recordKey(t.ID), bytes.NewReader(b), int64(len(b))); err != nil {
		return wire.Wrap(wire.Unavailable, err, "the task store is unavailable")
	}
	return nil
}

// load reads a stored task. A task stored as queued or running that this runner does not hold was cut
// short by the end of an earlier runner: it is answered as failed.
func (tt *Table) load(ctx context.Context, id string) (Task, error) {
	data, _, err := tt.store.Read(ctx, tt.recordKey(id))
	if errors.Is(err, blob.ErrNotFound) {
		return Task{}, wire.Errorf(wire.NotFound, "no task %s", id)
	}
	if err != nil {
		return Task{}, wire.Wrap(wire.Unavailable, err, "the task store is unavailable")
	}
	var t Task
	if err := json.Unmarshal(data, &t); err != nil {
		return Task{}, wire.Wrap(wire.Internal, err, "task record is corrupt")
	}
	if !t.Done() {
		t.Status = wire.TaskFailed
		t.Error = wire.Errorf(wire.Unavailable, "the sandbox stopped while the task ran")
	}
	return t, nil
}

// get returns a task of this user: the live one, else the stored one.
func (tt *Table) get(ctx context.Context, id string) (Task, error) {
	if !validTaskID(id) {
		return Task{}, wire.Errorf(wire.NotFound, "no task %s", strconv.Quote(id))
	}
	tt.mu.Lock()
	lt, ok := tt.live[id]
	tt.mu.Unlock()
	if ok {
		return lt.snapshot(), nil
	}
	return tt.load(ctx, id)
}

// getTask serves GET /v1/execute/{id}.
func (a *api) getTask(w http.ResponseWriter, req *http.Request) {
	t, err := a.t.get(req.Context(), req.PathValue("id"))
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	_ = httpx.WriteJSON(w, http.StatusOK, t)
}

// TaskList is the body of GET /v1/execute.
type TaskList struct {
	Tasks []Task `json:"tasks"`
}

// listTasks serves GET /v1/execute?limit=N: the user's newest tasks first (limit default 20, at most 100).
func (a *api) listTasks(w http.ResponseWriter, req *http.Request) {
	limit := 20
	if s := req.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxTaskList {
			web.Fail(w, req, wire.Errorf(wire.InvalidArgument, "limit must be 1 to %d", maxTaskList))
			return
		}
		limit = n
	}
	tt := a.t
	objs, err := tt.records(req.Context())
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	out := TaskList{Tasks: []Task{}}
	for _, o := range objs {
		if len(out.Tasks) == limit {
			break
		}
		t, err := tt.get(req.Context(), taskIDOf(o.Key))
		if wire.CodeOf(err) == wire.NotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			web.Fail(w, req, err)
			return
		}
		out.Tasks = append(out.Tasks, t)
	}
	slices.SortStableFunc(out.Tasks, func(x, y Task) int { return y.CreatedAt.Compare(x.CreatedAt) })
	_ = httpx.WriteJSON(w, http.StatusOK, out)
}

func taskIDOf(key string) string { return strings.TrimSuffix(path.Base(key), ".json") }

// records lists the stored task records, newest first, scanning at most maxTaskListScan objects.
func (tt *Table) records(ctx context.Context) ([]blob.Object, error) {
	var objs []blob.Object
	n := 0
	for o, err := range tt.store.List(ctx, tt.prefix+"/") {
		if err != nil {
			return nil, wire.Wrap(wire.Unavailable, err, "the task store is unavailable")
		}
		if n++; n > maxTaskListScan {
			break
		}
		if path.Dir(o.Key) == tt.prefix && validTaskID(taskIDOf(o.Key)) && strings.HasSuffix(o.Key, ".json") {
			objs = append(objs, o)
		}
	}
	slices.SortFunc(objs, func(x, y blob.Object) int { return y.Modified.Compare(x.Modified) })
	return objs, nil
}

// prune deletes the oldest finished tasks beyond Keep (and their idempotency records).
func (tt *Table) prune(ctx context.Context) {
	if !tt.pruneMu.TryLock() {
		return
	}
	defer tt.pruneMu.Unlock()
	objs, err := tt.records(ctx)
	if err != nil || len(objs) <= tt.cfg.Keep {
		return
	}
	for _, o := range objs[tt.cfg.Keep:] {
		id := taskIDOf(o.Key)
		tt.mu.Lock()
		_, live := tt.live[id]
		tt.mu.Unlock()
		if live {
			continue
		}
		if t, err := tt.load(ctx, id); err == nil && t.IdempotencyKey != "" {
			_ = tt.store.Delete(ctx, tt.idemKey(t.IdempotencyKey))
		}
		_ = tt.store.Delete(ctx, o.Key)
	}
}

// update changes the live task and stores it.
func (tt *Table) update(ctx context.Context, lt *liveTask, f func(*Task)) {
	lt.mu.Lock()
	f(&lt.t)
	t := lt.t
	lt.mu.Unlock()
	if err := tt.save(ctx, t); err != nil {
		tt.log.Warn("storing task failed", "task", t.ID, "err", err)
	}
}

// run waits for a slot, runs the task's one turn in a fresh session of the hub, records the outcome, and
// delivers the webhook.
func (tt *Table) run(ctx context.Context, lt *liveTask, g wire.Grant, opts json.RawMessage, timeout time.Duration, er ExecuteRequest) {
	id := lt.t.ID
	log := tt.log.With("task", id)
	defer func() {
		tt.mu.Lock()
		delete(tt.live, id)
		tt.active--
		tt.mu.Unlock()
		tt.prune(context.WithoutCancel(ctx))
	}()
	store := context.WithoutCancel(ctx)
	select {
	case tt.sem <- struct{}{}:
	case <-ctx.Done():
		tt.finish(store, lt, func(t *Task) { t.Error = wire.Errorf(wire.Unavailable, "the sandbox stopped before the task ran") })
		close(lt.done)
		return
	}
	started := tt.now().UTC()
	tt.update(store, lt, func(t *Task) { t.Status, t.StartedAt = wire.TaskRunning, &started })
	before := listWorkspace(tt.ws)
	out := runTaskTurn(ctx, tt.host.Hub(), g, opts, er.Prompt, timeout)
	after := listWorkspace(tt.ws)
	<-tt.sem
	changes, truncated := diffListings(before, after)
	tt.finish(store, lt, func(t *Task) {
		t.SessionID, t.Result, t.Subtype, t.NumTurns = out.sessionID, out.result, out.subtype, out.numTurns
		t.Cost, t.TotalCostUSD = out.cost, out.totalCostUSD
		t.FilesChanged, t.FilesChangedTruncated = changes, truncated
		t.Error = out.err
	})
	close(lt.done)
	final := lt.snapshot()
	log.Info("task finished", "status", final.Status, "session", final.SessionID, "files_changed", len(changes))
	if er.Webhook != nil {
		body, _ := json.Marshal(final)
		secret := WebhookSecret(tt.cfg.WebhookSecret, tt.issuer)
		st := deliverWebhook(ctx, tt.hook, er.Webhook.URL, id, secret, body, tt.cfg.WebhookAttempts, tt.cfg.WebhookBackoff, tt.now)
		outcome := "delivered"
		if !st.Delivered {
			outcome = "failed"
			log.Warn("task webhook not delivered", "attempts", st.Attempts, "err", st.LastError)
		}
		tt.hookCount.WithLabelValues(outcome).Inc()
		tt.update(store, lt, func(t *Task) { t.Webhook = &st })
	}
}

// finish sets the outcome (f), completes the task and stores it.
func (tt *Table) finish(ctx context.Context, lt *liveTask, f func(*Task)) {
	now := tt.now().UTC()
	tt.update(ctx, lt, func(t *Task) {
		f(t)
		t.CompletedAt = &now
		t.Status = wire.TaskSucceeded
		if t.Error != nil {
			t.Status = wire.TaskFailed
		}
	})
	tt.taskCount.WithLabelValues(lt.snapshot().Status).Inc()
}
