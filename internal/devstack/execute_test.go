package devstack_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	warren "github.com/warren-mesh/warren/sdk"
)

// hookCall is one request the test's webhook receiver got.
type hookCall struct {
	header http.Header
	body   []byte
}

// mainRequestsWith counts the model's main requests whose conversation contains s.
func mainRequestsWith(st *devstack.Stack, s string) int {
	n := 0
	for _, r := range mainRequests(st.Model) {
		if strings.Contains(string(r.Body), s) {
			n++
		}
	}
	return n
}

// TestExecuteThroughTheEdge runs one-shot tasks end to end: the edge admits and relays POST /v1/execute to
// the user's runner under bubblewrap, the real Claude CLI runs the prompt against the scripted model, the
// record is kept in the blob store, and the webhook is signed and delivered to a loopback receiver with
// the dev stack's defaults (its own webhook secret, loopback allowed), verified with the secret that
// `warren webhook-secret` and `warren admin issuers webhook-secret` print.
func TestExecuteThroughTheEdge(t *testing.T) {
	st := agentStack(t, agentOpts{args: []string{"-max-tasks", "2"}})
	ctx := agentCtx(t)
	secret := devWebhookSecret(t, st)

	// The receiver fails the first delivery: the runner retries.
	var (
		hookMu sync.Mutex
		calls  []hookCall
	)
	got := make(chan hookCall, 8)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hookMu.Lock()
		calls = append(calls, hookCall{r.Header.Clone(), b})
		first := len(calls) == 1
		hookMu.Unlock()
		if first {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		got <- hookCall{r.Header.Clone(), b}
	}))
	defer hook.Close()

	c := client(t, st, "tara", withBudget(5_000_000))
	const prompt = "create out.txt containing done"
	task, err := c.Execute(ctx, prompt, &warren.ExecuteOptions{Wait: true, WebhookURL: hook.URL + "/done", IdempotencyKey: "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != warren.TaskSucceeded || task.Error != nil || task.Result == "" {
		t.Fatalf("task: %+v (error %v)", task, task.Error)
	}
	if len(task.FilesChanged) != 1 || task.FilesChanged[0] != (warren.FileChange{Path: "out.txt", Change: "created"}) {
		t.Fatalf("files changed: %+v", task.FilesChanged)
	}
	if task.Cost == nil || task.Cost.AIMicrodollars <= 0 || task.TotalCostUSD <= 0 {
		t.Fatalf("task without a cost: %+v", task)
	}
	if b, err := c.Sandbox().ReadFile(ctx, "out.txt"); err != nil || string(b) != "done" {
		t.Fatalf("out.txt = %q, %v", b, err)
	}
	u, err := st.Ledger.Usage(ctx, billing.Account{Issuer: devstack.DevIssuer, User: "tara", Window: billing.Lifetime})
	if err != nil {
		t.Fatal(err)
	}
	if u.AIMicros != task.Cost.AIMicrodollars || u.HeldAIMicros != 0 {
		t.Fatalf("ledger used %d (held %d), the task says %d", u.AIMicros, u.HeldAIMicros, task.Cost.AIMicrodollars)
	}
	runs := mainRequestsWith(st, prompt)
	if runs == 0 {
		t.Fatal("the model never saw the task's prompt")
	}

	// Fetched later by id, and listed.
	again, err := c.Task(ctx, task.ID)
	if err != nil || again.Status != warren.TaskSucceeded || again.Result != task.Result || len(again.FilesChanged) != 1 {
		t.Fatalf("task by id: %+v, %v", again, err)
	}
	list, err := c.Tasks(ctx, 0)
	if err != nil || len(list) != 1 || list[0].ID != task.ID {
		t.Fatalf("tasks: %+v, %v", list, err)
	}

	// The retry with the same key is the same task; the model saw no second run.
	retry, err := c.Execute(ctx, prompt, &warren.ExecuteOptions{Wait: true, WebhookURL: hook.URL + "/done", IdempotencyKey: "k-1"})
	if err != nil || retry.ID != task.ID || retry.Status != warren.TaskSucceeded {
		t.Fatalf("idempotent retry: %+v, %v", retry, err)
	}
	if n := mainRequestsWith(st, prompt); n != runs {
		t.Fatalf("the retry ran the task again: %d model requests, were %d", n, runs)
	}
	// The same key for another request is a conflict.
	if _, err := c.Execute(ctx, "something else", &warren.ExecuteOptions{IdempotencyKey: "k-1"}); !warren.IsCode(err, wire.Conflict) {
		t.Fatalf("key reused for another prompt: %v, want conflict", err)
	}

	// The signed webhook arrives (after one retry) and verifies with the issuer's secret.
	var call hookCall
	select {
	case call = <-got:
	case <-ctx.Done():
		t.Fatal("no webhook")
	}
	hooked, err := warren.VerifyWebhook(secret, call.header, call.body, 0, time.Now())
	if err != nil || hooked.ID != task.ID || hooked.Status != warren.TaskSucceeded || call.header.Get(warren.HeaderWebhookID) != task.ID {
		t.Fatalf("webhook: %+v, %v", hooked, err)
	}
	if _, err := warren.VerifyWebhook(st.WebhookSecret("another-issuer"), call.header, call.body, 0, time.Now()); err == nil {
		t.Fatal("the webhook verifies with another issuer's secret")
	}
	tampered := append([]byte(nil), call.body...)
	tampered[len(tampered)/2] ^= 1
	if _, err := warren.VerifyWebhook(secret, call.header, tampered, 0, time.Now()); err == nil {
		t.Fatal("a tampered webhook body verifies")
	}
	waitFor(t, 30*time.Second, "the webhook's status on the task", func() bool {
		tk, err := c.Task(ctx, task.ID)
		return err == nil && tk.Webhook != nil && tk.Webhook.Delivered && tk.Webhook.Attempts == 2
	})

	// Two simultaneous requests with one key run once.
	const prompt2 = "create two.txt containing 2"
	var (
		wg    sync.WaitGroup
		ids   [2]string
		errs2 [2]error
	)
	for i := range 2 {
		wg.Go(func() {
			tk, err := c.Execute(ctx, prompt2, &warren.ExecuteOptions{Wait: true, IdempotencyKey: "k-2"})
			errs2[i] = err
			if err == nil {
				ids[i] = tk.ID
			}
		})
	}
	wg.Wait()
	if errs2[0] != nil || errs2[1] != nil || ids[0] != ids[1] {
		t.Fatalf("concurrent retries: ids %q, errors %v", ids, errs2)
	}
	if n := mainRequestsWith(st, prompt2); n != runs {
		t.Fatalf("two simultaneous requests with one key: %d model requests, one run makes %d", n, runs)
	}

	// Another user's task id is not found.
	other := client(t, st, "ugo", withBudget(5_000_000))
	if _, err := other.Task(ctx, task.ID); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("another user's task: %v, want not_found", err)
	}
	if _, err := c.Task(ctx, "t-../../sandboxes"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("a path as task id: %v, want not_found", err)
	}

	// The quota of queued and running tasks (-max-tasks 2): a task blocked on a file, one queued behind
	// it, and the third is refused; the others finish once the file exists.
	blocked, err := c.Execute(ctx, "run while [ ! -f /workspace/go ]; do sleep 0.2; done; echo released", nil)
	if err != nil || blocked.Done() {
		t.Fatalf("blocking task: %+v, %v", blocked, err)
	}
	queued, err := c.Execute(ctx, "create three.txt containing 3", nil)
	if err != nil {
		t.Fatalf("second task: %v", err)
	}
	if _, err := c.Execute(ctx, "create four.txt containing 4", nil); !warren.IsCode(err, wire.ConcurrencyLimit) {
		t.Fatalf("third task: %v, want concurrency_limit", err)
	}
	if _, err := c.Sandbox().WriteFile(ctx, "go", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{blocked.ID, queued.ID} {
		waitFor(t, 2*time.Minute, "task "+id, func() bool {
			tk, err := c.Task(ctx, id)
			return err == nil && tk.Done()
		})
		tk, _ := c.Task(ctx, id)
		if tk.Status != warren.TaskSucceeded {
			t.Fatalf("task %s: %+v (error %v)", id, tk, tk.Error)
		}
	}

	// The CLI: warren execute prints the result, the files changed and the cost; -id fetches it again.
	cliEnv := append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+mint(t, st, "tara", withBudget(5_000_000)))
	cmd := exec.Command(binary, "execute", "create cli.txt containing from the cli")
	cmd.Env = cliEnv
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "created   cli.txt") || !strings.Contains(string(out), "cost: $") {
		t.Fatalf("warren execute: %v\n%s", err, out)
	}
	cliID := strings.Fields(string(out))[1]
	cmd = exec.Command(binary, "execute", "-json", "-id", strings.TrimSuffix(cliID, ":"))
	cmd.Env = cliEnv
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), `"path":"cli.txt"`) {
		t.Fatalf("warren execute -id: %v\n%s", err, out)
	}

	// A task over its time is interrupted and fails with timeout.
	slow, err := client(t, st, "tim", withBudget(5_000_000)).Execute(ctx, "run while [ ! -f /workspace/never ]; do sleep 0.2; done",
		&warren.ExecuteOptions{Wait: true, Timeout: 3 * time.Second})
	if err != nil || slow.Status != warren.TaskFailed || slow.Error == nil || slow.Error.Code != wire.Timeout {
		t.Fatalf("task over its time: %+v, %v", slow, err)
	}

	// A task over the budget fails with budget_exceeded.
	poor := client(t, st, "wes", withBudget(20_000))
	over, err := poor.Execute(ctx, "create rich.txt containing money", &warren.ExecuteOptions{Wait: true})
	if err != nil {
		if !warren.IsCode(err, wire.BudgetExceeded) {
			t.Fatalf("task over budget: %v", err)
		}
		t.Logf("task over budget refused at admission: %v", err)
	} else if over.Status != warren.TaskFailed || over.Error == nil || over.Error.Code != wire.BudgetExceeded {
		t.Fatalf("task over budget: %+v (error %v)", over, over.Error)
	} else {
		t.Logf("task over budget failed: %v", over.Error)
	}
}

func TestExecuteRefusesBadRequests(t *testing.T) {
	st := agentStack(t, agentOpts{noWebhooks: true})
	ctx := agentCtx(t)
	c := client(t, st, "val", withBudget(5_000_000))
	for name, o := range map[string]*warren.ExecuteOptions{
		"webhook without a secret": {WebhookURL: "https://example.com/hook"},
		"session id":               {Session: &warren.SessionOptions{SessionID: "s-1"}},
		"bad key":                  {IdempotencyKey: "with space"},
	} {
		if _, err := c.Execute(ctx, "hello", o); !warren.IsCode(err, wire.InvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if _, err := c.Execute(ctx, "  ", nil); !warren.IsCode(err, wire.InvalidArgument) {
		t.Errorf("empty prompt: %v, want invalid_argument", err)
	}
	if n := len(mainRequests(st.Model)); n != 0 {
		t.Fatalf("refused tasks reached the model %d times", n)
	}
}

// devWebhookSecret is the dev issuer's webhook secret as `warren webhook-secret` prints it from the stack's
// data dir; `warren admin issuers webhook-secret` (the billing API) and the stack's own must agree, and the
// operator's secret must be a 0600 file of the data dir.
func devWebhookSecret(t *testing.T, st *devstack.Stack) string {
	t.Helper()
	dataDir := st.Config().DataDir
	path := devstack.WebhookSecretPath(dataDir)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("webhook secret file %s: %v, %v (want mode 0600)", path, fi, err)
	}
	master, err := runner.ReadWebhookMaster(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "webhook-secret", "-data-dir", dataDir, "-issuer", devstack.DevIssuer).Output()
	if err != nil {
		t.Fatalf("warren webhook-secret: %v", err)
	}
	secret := strings.TrimSpace(string(out))
	if secret != runner.WebhookSecret(master, devstack.DevIssuer) || secret != st.WebhookSecret(devstack.DevIssuer) {
		t.Fatalf("warren webhook-secret printed %q, want %q", secret, st.WebhookSecret(devstack.DevIssuer))
	}
	adm := exec.Command(binary, "admin", "issuers", "webhook-secret", devstack.DevIssuer, "-url", st.URL(), "-data-dir", dataDir)
	out, err = adm.Output()
	if err != nil || strings.TrimSpace(string(out)) != secret {
		t.Fatalf("warren admin issuers webhook-secret: %q, %v; want %q", out, err, secret)
	}
	return secret
}
