package tfprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/secrets/vault"
	"github.com/warren-mesh/warren/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// tf runs Terraform 1.5.7 in a working directory with the mirror's CLI configuration and a clean
// environment (testenv.TerraformCommand): no registry, no checkpoint calls, no prompts.
type tf struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

// run runs terraform args and returns its combined output and exit code; an error other than a non-zero
// exit fails the test.
func (f *tf) run(args ...string) (string, int) {
	f.t.Helper()
	cmd := testenv.TerraformCommand(context.Background(), f.bin, f.dir, args...)
	cmd.Env = append(cmd.Env, f.env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	f.t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	return "", 0
}

// ok runs terraform args and fails the test unless it exits 0.
func (f *tf) ok(args ...string) string {
	f.t.Helper()
	out, code := f.run(args...)
	if code != 0 {
		f.t.Fatalf("terraform %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// plan runs plan -detailed-exitcode: 0 no changes, 2 changes.
func (f *tf) plan() (string, int) {
	f.t.Helper()
	out, code := f.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
	if code != 0 && code != 2 {
		f.t.Fatalf("terraform plan exited %d:\n%s", code, out)
	}
	return out, code
}

// write replaces the configuration with main.tf.
func (f *tf) write(mainTF string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "main.tf"), []byte(mainTF), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// billingAPI is a client of the billing API for checks made beside Terraform.
type billingAPI struct {
	t        *testing.T
	url, key string
}

func (b billingAPI) get(path string, out any) int {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+b.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, out); err != nil {
			b.t.Fatalf("GET %s: %v: %s", path, err, data)
		}
	}
	return resp.StatusCode
}

func (b billingAPI) quota(path string) billing.Quota {
	b.t.Helper()
	var q billing.Quota
	if code := b.get(path, &q); code != http.StatusOK {
		b.t.Fatalf("GET %s = %d", path, code)
	}
	return q
}

const providerBlock = `terraform {
  required_providers {
    warren = { source = "warren/warren", version = "0.1.0" }
  }
}

provider "warren" {}
`

// config is the platform team's configuration: issuer acme, its default quota, alice's override, a price,
// and the data sources.
func config(rotation string, aiMicros int64, memory string) string {
	return providerBlock + fmt.Sprintf(`
resource "warren_issuer" "acme" {
  iss      = "acme"
  name     = "Acme Corp"
  rotation = %q
}

resource "warren_quota" "acme" {
  iss                        = warren_issuer.acme.iss
  ai_microdollars            = %d
  compute_seconds            = 3600
  window                     = "day"
  max_concurrent_sessions    = 2
  max_issuer_sessions        = 50
  issuer_connects_per_minute = 600
  max_memory_bytes           = %s
  max_processes              = 256
}

resource "warren_quota" "alice" {
  iss                     = warren_issuer.acme.iss
  sub                     = "alice"
  ai_microdollars         = -1
  compute_seconds         = 600
  window                  = "week"
  max_concurrent_sessions = 1
  prompts_per_minute      = 30
  cpu_millis              = 500
  max_background_processes = 1
  max_process_log_bytes    = 65536
  max_terminals            = -1
  max_preview_urls         = 3
}

resource "warren_price" "custom" {
  model          = "acme-model"
  input          = 1000000
  output         = 5000000
  cache_read     = 100000
  cache_creation = 1250000
}

data "warren_usage" "all" {
  from     = "2020-01-01"
  to       = "2100-01-01"
  group_by = "model"
}

output "key_id" { value = warren_issuer.acme.key_id }
output "secret" {
  value     = warren_issuer.acme.secret
  sensitive = true
}
output "usage" { value = jsonencode(data.warren_usage.all) }
`, rotation, aiMicros, memory)
}

// TestTerraform drives the provider, built from the repository and installed through a filesystem
// mirror, with real Terraform 1.5.7 against a real `warren billing` (Vault, PostgreSQL): create, a second
// plan that is empty, update with a key rotation, drift made through `warren admin` shown by plan and
// undone by apply, import, plan-time validation, destroy (a quota changed meanwhile is refused).
func TestTerraform(t *testing.T) {
	terraform := testenv.Terraform(t)
	bin := testenv.WarrenBinary(t)
	ctx := context.Background()

	// The billing role, as in production: Vault for keys (its admin key seeded by the operator), PostgreSQL.
	dsn := testenv.PostgreSQL(t)
	vs := testenv.StartVault(t)
	keys, err := vault.New(ctx, vault.Config{Addr: vs.Addr(), Token: vs.RootToken()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keys.Close() })
	adminKey, _, err := keys.EnsureAdminKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.StartWarren(t, []string{"VAULT_TOKEN=" + vs.RootToken()}, regexp.MustCompile(`"event":"ready".*"addr":"([^"]+)"`),
		"billing", "-listen", "127.0.0.1:0", "-vault", vs.Addr(), "-db", dsn)
	billingURL := "http://" + addr
	api := billingAPI{t: t, url: billingURL, key: adminKey}

	// Usage the ledger recorded (as runners and schedulers do), for warren_usage to report.
	pool, err := cockroachdb.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ledger, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, ev := range []billing.UsageEvent{
		{Account: billing.Account{Issuer: "acme", User: "alice"}, Kind: billing.KindAI, Model: "acme-model-1", AIMicros: 100},
		{Account: billing.Account{Issuer: "acme", User: "bob"}, Kind: billing.KindAI, Model: "acme-model-1", AIMicros: 250},
		{Account: billing.Account{Issuer: "acme", User: "alice"}, Kind: billing.KindCompute, ComputeSeconds: 30},
	} {
		ev.Key, ev.At, ev.Account.Window = fmt.Sprintf("tf-test-%d", i), at, billing.Lifetime
		if err := ledger.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	// The provider from the repository, installed as a platform team would: warren terraform-provider -install.
	mirror := t.TempDir()
	out, err := exec.Command(bin, "terraform-provider", "-install", mirror).CombinedOutput()
	if err != nil {
		t.Fatalf("warren terraform-provider -install: %v\n%s", err, out)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + filepath.Join(mirror, "warren.tfrc"), "TF_INPUT=0",
		"WARREN_URL=" + billingURL, "WARREN_ADMIN_KEY=" + adminKey}
	f := &tf{t: t, bin: terraform, dir: t.TempDir(), env: env}

	f.write(config("1", 5_000_000, "1073741824"))
	f.ok("init", "-input=false", "-no-color")

	// Create.
	f.ok("apply", "-auto-approve", "-input=false", "-no-color")
	q := api.quota("/v1/quotas/acme")
	want := billing.Quota{AIMicros: 5_000_000, ComputeSeconds: 3600, Window: billing.Day, MaxConcurrentSessions: 2,
		MaxIssuerSessions: 50, IssuerConnectsPerMinute: 600, SandboxQuota: billing.SandboxQuota{MaxMemoryBytes: 1 << 30, MaxProcesses: 256}, Revision: 1}
	if q != want {
		t.Fatalf("acme's quota after apply = %+v, want %+v", q, want)
	}
	alice := api.quota("/v1/quotas/acme/users/alice")
	if alice.AIMicros != billing.Unlimited || alice.Window != billing.Week || alice.PromptsPerMinute != 30 || alice.CPUMillis != 500 ||
		alice.MaxBackgroundProcesses != 1 || alice.MaxProcessLogBytes != 64<<10 || alice.MaxTerminals != -1 || alice.MaxPreviewURLs != 3 ||
		alice.MaxFileWatches != 0 || alice.MaxTasks != 0 {
		t.Fatalf("alice's quota after apply = %+v", alice)
	}
	var price struct {
		Price  billing.Price `json:"price"`
		Custom bool          `json:"custom"`
	}
	if api.get("/v1/prices/acme-model", &price); !price.Custom || price.Price != (billing.Price{Input: 1e6, Output: 5e6, CacheRead: 1e5, CacheCreation: 1_250_000}) {
		t.Fatalf("acme-model's price after apply = %+v", price)
	}
	kid1 := strings.TrimSpace(f.ok("output", "-raw", "key_id"))
	secret1 := strings.TrimSpace(f.ok("output", "-raw", "secret"))
	checkKey(t, keys, "acme", kid1, secret1)
	var usage struct {
		Rows []struct {
			Iss, Key       string
			AIMicros       int64 `json:"ai_microdollars"`
			ComputeSeconds int64 `json:"compute_seconds"`
			Events         int64 `json:"events"`
		} `json:"rows"`
		AIMicros       int64 `json:"ai_microdollars"`
		ComputeSeconds int64 `json:"compute_seconds"`
		Events         int64 `json:"events"`
	}
	if err := json.Unmarshal([]byte(f.ok("output", "-raw", "usage")), &usage); err != nil {
		t.Fatal(err)
	}
	if len(usage.Rows) != 2 || usage.Rows[0].Key != "" || usage.Rows[0].ComputeSeconds != 30 || usage.Rows[1].Key != "acme-model-1" ||
		usage.Rows[1].AIMicros != 350 || usage.AIMicros != 350 || usage.ComputeSeconds != 30 || usage.Events != 3 {
		t.Fatalf("warren_usage by model = %+v", usage)
	}

	// The second plan is empty.
	if out, code := f.plan(); code != 0 {
		t.Fatalf("plan after apply shows changes:\n%s", out)
	}

	// Update: a new budget and memory, and a rotation: a new key version, the previous one still valid.
	f.write(config("2", 7_000_000, "2147483648"))
	f.ok("apply", "-auto-approve", "-input=false", "-no-color")
	if q := api.quota("/v1/quotas/acme"); q.AIMicros != 7_000_000 || q.MaxMemoryBytes != 2<<30 || q.Revision != 2 {
		t.Fatalf("acme's quota after the update = %+v", q)
	}
	kid2 := strings.TrimSpace(f.ok("output", "-raw", "key_id"))
	secret2 := strings.TrimSpace(f.ok("output", "-raw", "secret"))
	if kid2 == kid1 || secret2 == secret1 {
		t.Fatalf("rotation kept key %s", kid1)
	}
	checkKey(t, keys, "acme", kid2, secret2)
	if out, code := f.plan(); code != 0 {
		t.Fatalf("plan after the update shows changes:\n%s", out)
	}

	// Drift: a change through `warren admin` shows in the plan; apply puts the configuration back.
	admin := exec.Command(bin, "admin", "quota", "set", "acme", "-ai-usd", "9", "-max-processes", "64")
	admin.Env = append(os.Environ(), "WARREN_BILLING_URL="+billingURL, "WARREN_ADMIN_KEY="+adminKey)
	if out, err := admin.CombinedOutput(); err != nil {
		t.Fatalf("warren admin quota set: %v\n%s", err, out)
	}
	out2, code := f.plan()
	if code != 2 {
		t.Fatalf("plan after warren admin changed the quota shows no changes:\n%s", out2)
	}
	for _, line := range []string{`warren_quota.acme will be updated in-place`, `ai_microdollars            = 9000000 -> 7000000`,
		`max_processes              = 64 -> 256`, `Plan: 0 to add, 1 to change, 0 to destroy.`} {
		if !strings.Contains(out2, line) {
			t.Fatalf("the drift plan lacks %q:\n%s", line, out2)
		}
	}
	f.ok("apply", "-auto-approve", "-input=false", "-no-color")
	if q := api.quota("/v1/quotas/acme"); q.AIMicros != 7_000_000 || q.MaxProcesses != 256 || q.Revision != 4 {
		t.Fatalf("acme's quota after undoing the drift = %+v", q)
	}
	if out, code := f.plan(); code != 0 {
		t.Fatalf("plan after undoing the drift shows changes:\n%s", out)
	}

	// Import: Terraform forgets the quotas and the price, imports them, and plans nothing.
	f.ok("state", "rm", "warren_quota.acme", "warren_quota.alice", "warren_price.custom")
	// What exists already is not taken over by a create: it is to be imported.
	if out, code := f.run("apply", "-auto-approve", "-input=false", "-no-color"); code == 0 ||
		!strings.Contains(flat(out), "Quota acme/alice exists already. Import it rather than create it: terraform import <address> acme/alice") ||
		!strings.Contains(flat(out), "Model acme-model has a price override. Import it") {
		t.Fatalf("apply of resources that exist: exit %d\n%s", code, out)
	}
	if out, code := f.run("import", "-no-color", "warren_quota.alice", "acme/%zz"); code == 0 || !strings.Contains(out, "Invalid import id for warren_quota") {
		t.Fatalf("import with a bad id: exit %d\n%s", code, out)
	}
	f.ok("import", "-no-color", "warren_quota.acme", "acme")
	f.ok("import", "-no-color", "warren_quota.alice", "acme/alice")
	f.ok("import", "-no-color", "warren_price.custom", "acme-model")
	if out, code := f.plan(); code != 0 {
		t.Fatalf("plan after import shows changes:\n%s", out)
	}
	// An imported issuer has no secret in state (the API shows one only when written): the plan says the
	// rotation will write one, and after that apply nothing is left to do.
	f.ok("state", "rm", "warren_issuer.acme")
	if out, code := f.run("apply", "-auto-approve", "-input=false", "-no-color"); code == 0 || !strings.Contains(out, "The Warren issuer exists already") {
		t.Fatalf("apply of an issuer that exists: exit %d\n%s", code, out)
	}
	f.ok("import", "-no-color", "warren_issuer.acme", "acme")
	out3, code := f.plan()
	if code != 2 || !strings.Contains(out3, `+ rotation = "2"`) || !strings.Contains(out3, `Plan: 0 to add, 1 to change, 0 to destroy.`) {
		t.Fatalf("plan after importing the issuer: exit %d\n%s", code, out3)
	}
	f.ok("apply", "-auto-approve", "-input=false", "-no-color")
	checkKey(t, keys, "acme", strings.TrimSpace(f.ok("output", "-raw", "key_id")), strings.TrimSpace(f.ok("output", "-raw", "secret")))
	if out, code := f.plan(); code != 0 {
		t.Fatalf("plan after the imported issuer's rotation shows changes:\n%s", out)
	}

	// Plan-time validation: what the API would refuse is refused before anything is sent.
	bad := &tf{t: t, bin: terraform, dir: t.TempDir(), env: env}
	bad.write(providerBlock + `
resource "warren_quota" "bad" {
  iss                     = "acme"
  sub                     = "bob"
  ai_microdollars         = -2
  compute_seconds         = 60
  window                  = "fortnight"
  max_concurrent_sessions = 1
  max_issuer_sessions     = 5
  max_memory_bytes        = 1000
  max_process_log_bytes   = -1
}

resource "warren_price" "bad" {
  model          = "bad"
  input          = -1
  output         = 1
  cache_read     = 1
  cache_creation = 1
}

resource "warren_issuer" "bad" {
  iss = ""
}

data "warren_usage" "bad" {
  from     = "yesterday"
  to       = "2026-01-01"
  group_by = "week"
}
`)
	bad.ok("init", "-input=false", "-no-color")
	vout, code := bad.run("validate", "-no-color")
	if code == 0 {
		t.Fatalf("terraform validate accepted a bad configuration:\n%s", vout)
	}
	for _, want := range []string{
		`ai_microdollars value must be at least -1, got: -2`,
		`window value must be one of`,
		`max_issuer_sessions applies to all of the issuer's users together`,
		`max_memory_bytes must be -1 (unlimited), 0 (not set) or at least 16777216, not 1000`,
		`max_process_log_bytes must be 0 (not set) or 4096 to 67108864, not -1`,
		`input value must be between 0 and 1000000000000, got: -1`,
		`iss must be 1 to 256 bytes of UTF-8 without control characters`,
		`from "yesterday": want RFC 3339`,
		`group_by value must be one of`,
	} {
		if !strings.Contains(flat(vout), want) {
			t.Errorf("terraform validate does not say %q:\n%s", want, vout)
		}
	}
	if code := api.get("/v1/quotas/acme/users/bob", &billing.Quota{}); code != http.StatusNotFound {
		t.Fatalf("bob's quota after the refused configuration: GET = %d, want 404", code)
	}

	// Destroy: the quotas and the price are deleted; the issuer, which the API cannot delete, is forgotten with
	// a warning. A quota changed through warren admin since Terraform read it is not deleted unseen.
	admin = exec.Command(bin, "admin", "quota", "set", "acme", "-user", "alice", "-compute", "601")
	admin.Env = append(os.Environ(), "WARREN_BILLING_URL="+billingURL, "WARREN_ADMIN_KEY="+adminKey)
	if out, err := admin.CombinedOutput(); err != nil {
		t.Fatalf("warren admin quota set: %v\n%s", err, out)
	}
	if out, code := f.run("destroy", "-auto-approve", "-input=false", "-no-color", "-refresh=false"); code == 0 ||
		!strings.Contains(out, "The Warren quota changed since Terraform read it") {
		t.Fatalf("destroy of a quota changed since the last refresh: exit %d\n%s", code, out)
	}
	if q := api.quota("/v1/quotas/acme/users/alice"); q.ComputeSeconds != 601 {
		t.Fatalf("alice's quota after the refused delete: %+v", q)
	}
	// The refused destroy deleted what did not depend on alice's quota (acme's quota, the price); the issuer
	// waited for it.
	dout := f.ok("destroy", "-auto-approve", "-input=false", "-no-color")
	for _, want := range []string{"Warren issuers cannot be deleted", "Destroy complete! Resources: 2 destroyed."} {
		if !strings.Contains(dout, want) {
			t.Fatalf("destroy does not say %q:\n%s", want, dout)
		}
	}
	if out := f.ok("state", "list"); strings.TrimSpace(out) != "" {
		t.Fatalf("state after destroy: %s", out)
	}
	for _, path := range []string{"/v1/quotas/acme", "/v1/quotas/acme/users/alice"} {
		if code := api.get(path, &billing.Quota{}); code != http.StatusNotFound {
			t.Fatalf("GET %s after destroy = %d, want 404", path, code)
		}
	}
	if api.get("/v1/prices/acme-model", &price); price.Custom {
		t.Fatalf("acme-model's override is still there after destroy: %+v", price)
	}
	if code := api.get("/v1/issuers/acme", &struct{}{}); code != http.StatusOK {
		t.Fatalf("GET /v1/issuers/acme after destroy = %d, want the issuer still registered", code)
	}
}

// flat is Terraform's output with its line wrapping and box drawing undone.
func flat(out string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(out, "│", "")), " ")
}

// checkKey fails unless kid is one of the issuer's live keys in Vault and secret its secret, as handed to
// customers.
func checkKey(t *testing.T, keys *vault.Store, iss, kid, secret string) {
	t.Helper()
	ks, err := keys.IssuerKeys(context.Background(), iss)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k.ID == kid {
			if k.Given() != secret {
				t.Fatalf("key %s: the provider's secret is not Vault's", kid)
			}
			return
		}
	}
	t.Fatalf("key %s is not a live key of %s in Vault", kid, iss)
}

// TestTerraformExample applies terraform/examples/provider, unchanged, against a real `warren dev` (one
// region, its billing API on the edge's address): the example stays true, and warren_regions reads a real
// edge.
func TestTerraformExample(t *testing.T) {
	terraform := testenv.Terraform(t)
	bin := testenv.WarrenBinary(t)
	data := t.TempDir()
	edge := testenv.StartWarren(t, nil, regexp.MustCompile(`^\s+edge\s+(http://\S+)`),
		"dev", "-no-agent", "-insecure-no-sandbox", "-listen", "127.0.0.1:0", "-data-dir", data, "-region", "eu-1")
	store, err := file.Open(filepath.Join(data, file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	adminKeys, err := store.AdminKeys(context.Background())
	if err != nil || len(adminKeys) == 0 {
		t.Fatalf("warren dev's admin key: %v %v", adminKeys, err)
	}
	mirror := t.TempDir()
	if out, err := exec.Command(bin, "terraform-provider", "-install", mirror).CombinedOutput(); err != nil {
		t.Fatalf("warren terraform-provider -install: %v\n%s", err, out)
	}
	f := &tf{t: t, bin: terraform, dir: t.TempDir(), env: []string{"TF_CLI_CONFIG_FILE=" + filepath.Join(mirror, "warren.tfrc"),
		"TF_INPUT=0", "WARREN_ADMIN_KEY=" + adminKeys[0]}}
	example, err := os.ReadFile("../../terraform/examples/provider/main.tf")
	if err != nil {
		t.Fatal(err)
	}
	f.write(string(example))
	f.ok("init", "-input=false", "-no-color")
	f.ok("apply", "-auto-approve", "-input=false", "-no-color", "-var", "billing_url="+edge)
	if out, code := f.run("plan", "-detailed-exitcode", "-no-color", "-input=false", "-var", "billing_url="+edge); code != 0 {
		t.Fatalf("plan after applying the example: exit %d\n%s", code, out)
	}
	var urls map[string]string
	if err := json.Unmarshal([]byte(f.ok("output", "-json", "region_urls")), &urls); err != nil {
		t.Fatal(err)
	}
	if len(urls) != 1 || urls["eu-1"] != edge {
		t.Fatalf("region_urls = %v, want eu-1 at %s", urls, edge)
	}
	if kid := strings.TrimSpace(f.ok("output", "-raw", "acme_key_id")); kid != "acme-v1" {
		t.Fatalf("acme_key_id = %q", kid)
	}
	keys, err := store.IssuerKeys(context.Background(), "acme")
	if err != nil || len(keys) == 0 || keys[0].Given() != strings.TrimSpace(f.ok("output", "-raw", "acme_secret")) {
		t.Fatalf("acme's key in warren dev's store is not the example's acme_secret (%v)", err)
	}
}
