package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
)

// adminEnv is the billing API over a real SQLite ledger and secrets file in a dev-like data dir.
type adminEnv struct {
	url, dataDir, key string
	ledger            *sqlite.Ledger
	store             *file.Store
}

func newAdminEnv(t *testing.T) *adminEnv {
	t.Helper()
	for _, k := range []string{"WARREN_BILLING_URL", "WARREN_URL", "WARREN_ADMIN_KEY", "WARREN_DATA_DIR"} {
		t.Setenv(k, "")
	}
	e := &adminEnv{dataDir: t.TempDir()}
	var err error
	if e.ledger, err = sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(e.dataDir, "ledger.db")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ledger.Close() })
	if e.store, err = file.Open(filepath.Join(e.dataDir, file.DefaultFileName)); err != nil {
		t.Fatal(err)
	}
	if e.key, _, err = e.store.EnsureAdminKey(); err != nil {
		t.Fatal(err)
	}
	api, err := billing.NewAPI(billing.APIConfig{Store: e.ledger, Keys: e.store, AdminKeys: e.store.AdminKeys})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// run runs `warren admin -url URL -data-dir DIR args...`, so the key comes from the data dir.
func (e *adminEnv) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runAdmin(context.Background(), append([]string{"-url", e.url, "-data-dir", e.dataDir}, args...), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func (e *adminEnv) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := e.run(t, args...)
	if err != nil {
		t.Fatalf("warren admin %v: %v (stderr %q)", args, err, stderr)
	}
	return out
}

func (e *adminEnv) mustJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	if err := json.Unmarshal([]byte(e.mustRun(t, append(args, "-json")...)), out); err != nil {
		t.Fatalf("warren admin %v -json: %v", args, err)
	}
}

func TestAdminIssuersAndKeys(t *testing.T) {
	e := newAdminEnv(t)
	out := e.mustRun(t, "issuers", "put", "acme", "-name", "Acme")
	if !strings.Contains(out, "issuer acme registered") || !strings.Contains(out, "keys rotate acme") {
		t.Fatalf("issuers put: %q", out)
	}
	// Without -name the current name is kept.
	if out := e.mustRun(t, "issuers", "put", "acme"); !strings.Contains(out, `updated (name "Acme")`) {
		t.Fatalf("issuers put again: %q", out)
	}
	e.mustRun(t, "quota", "set", "acme", "-ai-usd", "2.5", "-compute", "1h", "-window", "week", "-max-sessions", "3")
	out = e.mustRun(t, "issuers", "ls")
	for _, want := range []string{"ISS", "acme", "Acme", "$2.50 per week", "3600s (1h0m0s)", "3"} {
		if !strings.Contains(out, want) {
			t.Fatalf("issuers ls lacks %q:\n%s", want, out)
		}
	}
	var list struct{ Issuers []billing.Issuer }
	e.mustJSON(t, &list, "issuers", "ls")
	if len(list.Issuers) != 1 || list.Issuers[0].Quota == nil || list.Issuers[0].Quota.AIMicros != 2_500_000 {
		t.Fatalf("issuers ls -json: %+v", list)
	}

	// keys rotate: the secret printed once signs tokens the file store's verifier accepts under the kid.
	var key struct{ Kid, Secret string }
	e.mustJSON(t, &key, "keys", "rotate", "acme")
	if key.Kid != "acme-v1" {
		t.Fatalf("kid %q", key.Kid)
	}
	// It is a text secret, used as given: its UTF-8 bytes are the HMAC key.
	if !secrets.ValidTextSecret(key.Secret) {
		t.Fatalf("keys rotate printed a secret of %d chars that is not a wsk_ text secret", len(key.Secret))
	}
	now := time.Now()
	tok, err := token.Mint(secrets.Key{ID: key.Kid, Secret: []byte(key.Secret)}, token.Claims{Issuer: "acme", Subject: "u", IssuedAt: now, ExpiresAt: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := token.NewVerifier(e.store, token.VerifierOptions{}).Verify(context.Background(), tok); err != nil {
		t.Fatalf("token signed with the rotated key: %v", err)
	}
	out, stderr, err := e.run(t, "keys", "rotate", "acme")
	if err != nil || !strings.Contains(out, "kid     acme-v2") || !strings.Contains(out, "secret  wsk_") ||
		!strings.Contains(stderr, "shown only this once") || !strings.Contains(stderr, "never base64-decode") {
		t.Fatalf("keys rotate: %v\n%s\n%s", err, out, stderr)
	}
	if _, _, err := e.run(t, "keys", "rotate", "ghost"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("rotate an unregistered issuer: %v", err)
	}
}

func TestAdminQuota(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	if _, _, err := e.run(t, "quota", "set", "acme", "-ai-usd", "5"); err == nil || !strings.Contains(err.Error(), "-compute, -window, -max-sessions") {
		t.Fatalf("a new quota without every flag: %v", err)
	}
	out := e.mustRun(t, "quota", "set", "acme", "-ai-usd", "5", "-compute", "3600", "-window", "day", "-max-sessions", "unlimited")
	if !strings.Contains(out, "revision 1") || !strings.Contains(out, "$5.00 per day") || !strings.Contains(out, "unlimited at once") {
		t.Fatalf("quota set: %q", out)
	}
	// Flags left out keep their value; the revision read just before is sent.
	var q adminclient.Quota
	e.mustJSON(t, &q, "quota", "set", "acme", "-ai-usd", "unlimited")
	want := adminclient.Quota{Issuer: "acme", Quota: billing.Quota{AIMicros: -1, ComputeSeconds: 3600, Window: billing.Day, MaxConcurrentSessions: -1, Revision: 2}}
	if q != want {
		t.Fatalf("quota set -ai-usd unlimited = %+v, want %+v", q, want)
	}
	// A stale -revision is a conflict, said so.
	_, _, err := e.run(t, "quota", "set", "acme", "-ai-usd", "1", "-revision", "1")
	if err == nil || !strings.Contains(err.Error(), "conflict") || !adminclient.IsCode(err, "conflict") {
		t.Fatalf("stale -revision: %v", err)
	}
	e.mustRun(t, "quota", "set", "acme", "-compute", "2h", "-revision", "2")
	e.mustJSON(t, &q, "quota", "get", "acme")
	if q.Revision != 3 || q.ComputeSeconds != 7200 || q.AIMicros != -1 {
		t.Fatalf("quota get = %+v", q)
	}

	// A user's override, and the fallback to the issuer's default when there is none.
	e.mustRun(t, "quota", "set", "acme", "-user", "alice", "-ai-usd", "0.25", "-compute", "60", "-window", "lifetime", "-max-sessions", "1")
	out = e.mustRun(t, "quota", "get", "acme", "-user", "alice")
	if !strings.Contains(out, "acme/alice, revision 1") || !strings.Contains(out, "$0.25 in total") {
		t.Fatalf("quota get -user alice: %q", out)
	}
	out = e.mustRun(t, "quota", "get", "-user", "bob", "acme")
	if !strings.Contains(out, "bob has no quota of its own") || !strings.Contains(out, "acme (issuer default), revision 3") {
		t.Fatalf("quota get -user bob: %q", out)
	}
	if _, _, err := e.run(t, "quota", "get", "beta"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("quota of an unknown issuer: %v", err)
	}
}

// The admission flags: optional on a new quota, kept when left out, shown in the table and in -json;
// "default" unsets, 0 and negatives are refused here, and the issuer-wide ones by the API on an override.
func TestAdminQuotaAdmissionFields(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	out := e.mustRun(t, "quota", "set", "acme", "-ai-usd", "5", "-compute", "3600", "-window", "day", "-max-sessions", "2",
		"-max-issuer-sessions", "10", "-connects-per-minute", "30", "-issuer-connects-per-minute", "unlimited")
	for _, want := range []string{"issuer sessions  10 at once, all users", "connects         30 per minute",
		"issuer connects  unlimited", "prompts          edge default"} {
		if !strings.Contains(out, want) {
			t.Fatalf("quota set lacks %q:\n%s", want, out)
		}
	}
	// A flag alone is something to set; the others keep their value.
	var q adminclient.Quota
	e.mustJSON(t, &q, "quota", "set", "acme", "-prompts-per-minute", "5")
	want := adminclient.Quota{Issuer: "acme", Quota: billing.Quota{AIMicros: 5_000_000, ComputeSeconds: 3600, Window: billing.Day,
		MaxConcurrentSessions: 2, MaxIssuerSessions: 10, ConnectsPerMinute: 30, IssuerConnectsPerMinute: -1,
		PromptsPerMinute: 5, Revision: 2}}
	if q != want {
		t.Fatalf("quota set -prompts-per-minute 5 = %+v, want %+v", q, want)
	}
	e.mustRun(t, "quota", "set", "acme", "-max-issuer-sessions", "default", "-connects-per-minute", "default")
	e.mustJSON(t, &q, "quota", "get", "acme")
	want.MaxIssuerSessions, want.ConnectsPerMinute, want.Revision = 0, 0, 3
	if q != want {
		t.Fatalf("quota get after default = %+v, want %+v", q, want)
	}
	if out := e.mustRun(t, "quota", "get", "acme"); !strings.Contains(out, "issuer sessions  no cap") {
		t.Fatalf("quota get:\n%s", out)
	}
	for _, bad := range [][]string{
		{"-prompts-per-minute", "0"}, {"-connects-per-minute", "-2"}, {"-max-issuer-sessions", "lots"},
	} {
		if _, _, err := e.run(t, append([]string{"quota", "set", "acme"}, bad...)...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("quota set %v: %v, want an error naming the flag", bad, err)
		}
	}

	// A user's override: per-user rates only, shown falling back to the issuer's.
	out = e.mustRun(t, "quota", "set", "acme", "-user", "alice", "-ai-usd", "1", "-compute", "60", "-window", "day",
		"-max-sessions", "1", "-connects-per-minute", "3")
	if !strings.Contains(out, "connects         3 per minute") || !strings.Contains(out, "prompts          issuer default") ||
		strings.Contains(out, "issuer sessions") {
		t.Fatalf("quota set -user alice:\n%s", out)
	}
	_, _, err := e.run(t, "quota", "set", "acme", "-user", "alice", "-max-issuer-sessions", "2")
	if err == nil || !adminclient.IsCode(err, "invalid_argument") || !strings.Contains(err.Error(), "/v1/quotas/acme") {
		t.Fatalf("an issuer cap on an override: %v", err)
	}
}

// -issuer-prompts-per-minute: N, unlimited or default on the issuer's default, alone or with others, shown
// in the table and in -json; 0 and junk refused here, any value on an override by the API.
func TestAdminQuotaIssuerPrompts(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	out := e.mustRun(t, "quota", "set", "acme", "-ai-usd", "5", "-compute", "3600", "-window", "day", "-max-sessions", "2",
		"-issuer-prompts-per-minute", "300", "-prompts-per-minute", "6")
	for _, want := range []string{"prompts          6 per minute", "issuer prompts   300 per minute, all users"} {
		if !strings.Contains(out, want) {
			t.Fatalf("quota set lacks %q:\n%s", want, out)
		}
	}
	var q adminclient.Quota
	e.mustJSON(t, &q, "quota", "set", "acme", "-issuer-prompts-per-minute", "unlimited")
	want := adminclient.Quota{Issuer: "acme", Quota: billing.Quota{AIMicros: 5_000_000, ComputeSeconds: 3600, Window: billing.Day,
		MaxConcurrentSessions: 2, PromptsPerMinute: 6, IssuerPromptsPerMinute: -1, Revision: 2}}
	if q != want {
		t.Fatalf("quota set -issuer-prompts-per-minute unlimited = %+v, want %+v", q, want)
	}
	if out := e.mustRun(t, "quota", "get", "acme"); !strings.Contains(out, "issuer prompts   unlimited") {
		t.Fatalf("quota get:\n%s", out)
	}
	e.mustJSON(t, &q, "quota", "set", "acme", "-issuer-prompts-per-minute", "default")
	want.IssuerPromptsPerMinute, want.Revision = 0, 3
	if q != want {
		t.Fatalf("quota set -issuer-prompts-per-minute default = %+v, want %+v", q, want)
	}
	if out := e.mustRun(t, "quota", "get", "acme"); !strings.Contains(out, "issuer prompts   edge default") {
		t.Fatalf("quota get:\n%s", out)
	}
	for _, bad := range []string{"0", "-2", "many"} {
		_, _, err := e.run(t, "quota", "set", "acme", "-issuer-prompts-per-minute", bad)
		if err == nil || !strings.Contains(err.Error(), "-issuer-prompts-per-minute") {
			t.Errorf("quota set -issuer-prompts-per-minute %s: %v, want an error naming the flag", bad, err)
		}
	}

	out = e.mustRun(t, "quota", "set", "acme", "-user", "alice", "-ai-usd", "1", "-compute", "60", "-window", "day",
		"-max-sessions", "1")
	if strings.Contains(out, "issuer prompts") {
		t.Fatalf("an override shows the issuer-wide prompt rate:\n%s", out)
	}
	for _, v := range []string{"7", "unlimited"} {
		_, _, err := e.run(t, "quota", "set", "acme", "-user", "alice", "-issuer-prompts-per-minute", v)
		if err == nil || !adminclient.IsCode(err, "invalid_argument") || !strings.Contains(err.Error(), "/v1/quotas/acme") {
			t.Fatalf("an issuer prompt rate %s on an override: %v", v, err)
		}
	}
}

// The sandbox limit flags: counts and sizes (bytes or with a unit), unlimited or default, on the issuer's
// default and on an override, shown in the table (sizes in binary units) and in -json; 0 and junk refused
// here naming the flag, a value below the field's minimum by the API naming the field.
func TestAdminQuotaSandboxLimits(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	out := e.mustRun(t, "quota", "set", "acme", "-ai-usd", "5", "-compute", "3600", "-window", "day", "-max-sessions", "2",
		"-max-processes", "64", "-max-memory", "512MiB", "-cpu-millis", "1500", "-max-tmp", "64mib",
		"-max-workspace", "2 GiB", "-max-concurrent-execs", "3", "-max-stored", "10737418240")
	for _, want := range []string{"processes        64 at once", "memory           512 MiB", "cpu              1500 millicores",
		"tmp              64 MiB per command", "workspace        2 GiB", "execs            3 at once",
		"stored           10 GiB of snapshots"} {
		if !strings.Contains(out, want) {
			t.Fatalf("quota set lacks %q:\n%s", want, out)
		}
	}
	var q adminclient.Quota
	e.mustJSON(t, &q, "quota", "set", "acme", "-max-memory", "unlimited", "-max-stored", "default", "-max-tmp", "1.5GiB")
	want := adminclient.Quota{Issuer: "acme", Quota: billing.Quota{AIMicros: 5_000_000, ComputeSeconds: 3600, Window: billing.Day,
		MaxConcurrentSessions: 2, Revision: 2, SandboxQuota: billing.SandboxQuota{MaxProcesses: 64, MaxMemoryBytes: -1,
			CPUMillis: 1500, MaxTmpBytes: 3 << 29, MaxWorkspaceBytes: 2 << 30, MaxConcurrentExecs: 3}}}
	if q != want {
		t.Fatalf("quota set = %+v, want %+v", q, want)
	}
	out = e.mustRun(t, "quota", "get", "acme")
	for _, want := range []string{"memory           unlimited", "stored           runner default", "tmp              1536 MiB per command"} {
		if !strings.Contains(out, want) {
			t.Fatalf("quota get lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range [][]string{
		{"-max-memory", "0"}, {"-max-memory", "-2"}, {"-max-memory", "lots"}, {"-max-tmp", "12XB"}, {"-max-stored", "0.0001"},
		{"-max-workspace", "-1GiB"}, {"-max-processes", "0"}, {"-cpu-millis", "1.5"}, {"-max-concurrent-execs", "many"},
	} {
		if _, _, err := e.run(t, append([]string{"quota", "set", "acme"}, bad...)...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("quota set %v: %v, want an error naming the flag", bad, err)
		}
	}
	for _, bad := range [][]string{{"-max-memory", "1MiB", "max_memory_bytes"}, {"-max-processes", "7", "max_processes"},
		{"-cpu-millis", "9", "cpu_millis"}} {
		_, _, err := e.run(t, "quota", "set", "acme", bad[0], bad[1])
		if err == nil || !adminclient.IsCode(err, "invalid_argument") || !strings.Contains(err.Error(), bad[2]) {
			t.Errorf("quota set %s %s: %v, want invalid_argument naming %s", bad[0], bad[1], err, bad[2])
		}
	}
	if e.mustJSON(t, &q, "quota", "get", "acme"); q != want {
		t.Fatalf("refused writes changed the quota: %+v, want %+v", q, want)
	}

	// An override may set them too; what it leaves unset falls back to the issuer's.
	out = e.mustRun(t, "quota", "set", "acme", "-user", "alice", "-ai-usd", "1", "-compute", "60", "-window", "day",
		"-max-sessions", "1", "-max-memory", "1GiB")
	if !strings.Contains(out, "memory           1 GiB") || !strings.Contains(out, "processes        issuer default") {
		t.Fatalf("quota set -user alice:\n%s", out)
	}
}

// parseSize reads bytes and sizes with a unit exactly; fractions round to the byte; overflows and sizes
// that round to nothing are refused.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1": 1, "4096": 4096, "16MiB": 16 << 20, "16 MiB": 16 << 20, "2gib": 2 << 30, "1.5GiB": 3 << 29, "3KiB": 3 << 10,
		"1TiB": 1 << 40, "2GB": 2e9, "5kb": 5000, "7B": 7, "0.5KiB": 512, "8388607TiB": 8388607 << 40,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "GiB", "1XiB", "0.1B", "8388608TiB", "1e30", "NaN", "inf", "1.5.5MiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestAdminUsage(t *testing.T) {
	e := newAdminEnv(t)
	day := time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)
	acct := billing.Account{Issuer: "acme", User: "alice", Window: billing.Lifetime}
	for _, ev := range []billing.UsageEvent{
		{Key: "a", Account: acct, Kind: billing.KindAI, Model: "opus", AIMicros: 1_500_000, At: day},
		{Key: "b", Account: acct, Kind: billing.KindCompute, ComputeSeconds: 90, At: day},
		{Key: "c", Account: billing.Account{Issuer: "acme", User: "bob", Window: billing.Lifetime}, Kind: billing.KindAI, Model: "opus", AIMicros: 10, At: day},
	} {
		if err := e.ledger.Record(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	rng := []string{"-from", "2030-03-01", "-to", "2030-04-01"}
	out := e.mustRun(t, append([]string{"usage"}, rng...)...)
	for _, want := range []string{"by user", "alice", "1.50", "90s (1m30s)", "TOTAL", "1.50001"} {
		if !strings.Contains(out, want) {
			t.Fatalf("usage lacks %q:\n%s", want, out)
		}
	}
	out = e.mustRun(t, append([]string{"usage", "-group-by", "model", "-iss", "acme", "-user", "alice"}, rng...)...)
	if !strings.Contains(out, "(compute)") || strings.Contains(out, "bob") {
		t.Fatalf("usage by model of alice:\n%s", out)
	}
	var report struct {
		Rows   []map[string]any
		Totals billing.UsageTotals
	}
	e.mustJSON(t, &report, append([]string{"usage", "-group-by", "day"}, rng...)...)
	if len(report.Rows) != 1 || report.Rows[0]["day"] != "2030-03-04" || report.Totals.Events != 3 {
		t.Fatalf("usage -json: %+v", report)
	}
	records, err := csv.NewReader(strings.NewReader(e.mustRun(t, append([]string{"usage", "-csv"}, rng...)...))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 3 || strings.Join(records[1], ",") != "acme,alice,1500000,90,2" {
		t.Fatalf("usage -csv: %v", records)
	}
	if _, _, err := e.run(t, "usage", "-group-by", "week"); err == nil || !strings.Contains(err.Error(), "group_by") {
		t.Fatalf("bad -group-by: %v", err)
	}
	if _, _, err := e.run(t, "usage", "-user", "alice"); err == nil || !strings.Contains(err.Error(), "-user needs -iss") {
		t.Fatalf("-user without -iss: %v", err)
	}
}

func TestAdminPrices(t *testing.T) {
	e := newAdminEnv(t)
	out := e.mustRun(t, "prices", "ls")
	if !strings.Contains(out, "claude-sonnet") || !strings.Contains(out, "3.00") || !strings.Contains(out, "(default)") || strings.Contains(out, "custom") {
		t.Fatalf("prices ls:\n%s", out)
	}
	// Flags left out keep the model's current (here built-in) price.
	out = e.mustRun(t, "prices", "set", "claude-sonnet", "-input", "2.5", "-cache-read", "0.0001")
	if !strings.Contains(out, "input 2.50, output 15.00, cache read 0.0001, cache creation 3.75") {
		t.Fatalf("prices set: %q", out)
	}
	var table adminclient.PriceTable
	e.mustJSON(t, &table, "prices", "ls")
	for _, m := range table.Models {
		if m.Model == "claude-sonnet" && (!m.Custom || m.Price.Input != 2_500_000 || m.Price.CacheRead != 100) {
			t.Fatalf("claude-sonnet after set: %+v", m)
		}
	}
	if _, _, err := e.run(t, "prices", "set", "m", "-input", "-1"); err == nil || !strings.Contains(err.Error(), "-input") {
		t.Fatalf("negative price: %v", err)
	}
	if _, _, err := e.run(t, "prices", "set", "m"); err == nil || !strings.Contains(err.Error(), "nothing to set") {
		t.Fatalf("no price flag: %v", err)
	}
}

// quota delete and prices delete: at the revision read or given (a stale one is a conflict); what is gone is
// not found.
func TestAdminDeletes(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	e.mustRun(t, "quota", "set", "acme", "-ai-usd", "5", "-compute", "3600", "-window", "day", "-max-sessions", "2")
	e.mustRun(t, "quota", "set", "acme", "-user", "alice", "-ai-usd", "1", "-compute", "60", "-window", "day", "-max-sessions", "1")
	e.mustRun(t, "quota", "set", "acme", "-user", "alice", "-compute", "61")
	if _, _, err := e.run(t, "quota", "delete", "acme", "-user", "alice", "-revision", "1"); err == nil || !adminclient.IsCode(err, "conflict") {
		t.Fatalf("quota delete at a stale revision: %v", err)
	}
	if out := e.mustRun(t, "quota", "delete", "acme", "-user", "alice"); !strings.Contains(out, "deleted the quota of acme/alice") || !strings.Contains(out, "revision 2") {
		t.Fatalf("quota delete -user alice: %q", out)
	}
	if out := e.mustRun(t, "quota", "get", "acme", "-user", "alice"); !strings.Contains(out, "alice has no quota of its own") {
		t.Fatalf("quota get after the delete: %q", out)
	}
	if _, _, err := e.run(t, "quota", "delete", "acme", "-user", "alice"); err == nil || !adminclient.IsCode(err, "not_found") {
		t.Fatalf("quota delete of a deleted quota: %v", err)
	}
	e.mustRun(t, "quota", "delete", "acme", "-revision", "1")
	if _, _, err := e.run(t, "quota", "get", "acme"); err == nil || !adminclient.IsCode(err, "not_found") {
		t.Fatalf("quota get after deleting the default: %v", err)
	}
	e.mustRun(t, "prices", "set", "acme-model", "-input", "1", "-output", "2")
	if out := e.mustRun(t, "prices", "delete", "acme-model"); !strings.Contains(out, "deleted the price override of acme-model") {
		t.Fatalf("prices delete: %q", out)
	}
	if _, _, err := e.run(t, "prices", "delete", "acme-model"); err == nil || !adminclient.IsCode(err, "not_found") {
		t.Fatalf("prices delete of a deleted override: %v", err)
	}
}

func TestAdminKeyAndURL(t *testing.T) {
	e := newAdminEnv(t)
	empty := t.TempDir()
	run := func(args ...string) error {
		var stdout, stderr bytes.Buffer
		return runAdmin(context.Background(), args, &stdout, &stderr)
	}
	// $WARREN_ADMIN_KEY and $WARREN_BILLING_URL are the defaults; -admin-key wins over both.
	t.Setenv("WARREN_BILLING_URL", e.url)
	t.Setenv("WARREN_URL", "http://127.0.0.1:1")
	t.Setenv("WARREN_ADMIN_KEY", e.key)
	if err := run("-data-dir", empty, "issuers", "ls"); err != nil {
		t.Fatalf("key from the environment: %v", err)
	}
	err := run("issuers", "ls", "-data-dir", empty, "-admin-key", "wak_wrong")
	if err == nil || !strings.Contains(err.Error(), "admin key was rejected") {
		t.Fatalf("wrong -admin-key: %v", err)
	}
	t.Setenv("WARREN_ADMIN_KEY", "")
	if err := run("-data-dir", empty, "issuers", "ls"); err == nil || !strings.Contains(err.Error(), "no admin key") {
		t.Fatalf("no key anywhere: %v", err)
	}
	// $WARREN_URL is the fallback, and a refused connection says what to do.
	t.Setenv("WARREN_BILLING_URL", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("WARREN_URL", "http://"+addr)
	err = run("-data-dir", e.dataDir, "issuers", "ls")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the billing API at http://"+addr) {
		t.Fatalf("refused connection: %v", err)
	}
	if err := run("-url", "ftp://x", "-data-dir", e.dataDir, "issuers", "ls"); err == nil || !strings.Contains(err.Error(), "bad -url") {
		t.Fatalf("bad -url: %v", err)
	}
}

func TestAdminArgs(t *testing.T) {
	e := newAdminEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"issuers"}, "unknown command"},
		{[]string{"issuers", "rm", "x"}, "unknown command"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"issuers", "put"}, "missing ISS"},
		{[]string{"issuers", "put", "a", "b"}, "unexpected arguments"},
		{[]string{"keys", "rotate"}, "missing ISS"},
		{[]string{"quota", "get"}, "missing ISS"},
		{[]string{"prices", "set"}, "missing MODEL"},
		{[]string{"issuers", "ls", "extra"}, "unexpected arguments"},
		{[]string{"quota", "set", "acme", "-window", "year"}, "-window"},
		{[]string{"quota", "set", "acme", "-ai-usd", "lots"}, "-ai-usd"},
		{[]string{"quota", "set", "acme", "-compute", "-5"}, "-compute"},
		{[]string{"quota", "set", "acme", "-max-sessions", "1.5"}, "-max-sessions"},
		{[]string{"quota", "set", "acme", "-revision", "-3", "-ai-usd", "1"}, "-revision"},
		{[]string{"issuers", "put", "a\x01b"}, "invalid request"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if tc.want == "-window" || tc.want == "-ai-usd" || tc.want == "-compute" || tc.want == "-max-sessions" || tc.want == "-revision" {
				e.mustRun(t, "issuers", "put", "acme")
				e.mustRun(t, "quota", "set", "acme", "-ai-usd", "1", "-compute", "1", "-window", "day", "-max-sessions", "1")
			}
			_, _, err := e.run(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	// The subcommand is registered with the dispatcher.
	if _, ok := commands["admin"]; !ok {
		t.Fatal("admin is not registered")
	}
}

// The per-user limit flags that were runner and edge flags: set, shown, in -json, back to default; the
// process log size with a unit, refused as unlimited by the API naming the field.
func TestAdminQuotaPerUserLimits(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	flags := [][3]string{ // flag, value, as shown
		{"-max-background-processes", "1", "bg processes     1 at once"},
		{"-max-process-log", "64KiB", "process log      64 KiB per process"},
		{"-max-file-watches", "unlimited", "file watches     unlimited"},
		{"-max-terminals", "2", "terminals        2 at once"},
		{"-max-tasks", "3", "tasks            3 queued or running"},
		{"-max-preview-urls", "4", "preview urls     4 live"},
	}
	args := []string{"quota", "set", "acme", "-user", "alice", "-ai-usd", "5", "-compute", "3600", "-window", "day", "-max-sessions", "2"}
	for _, f := range flags {
		args = append(args, f[0], f[1])
	}
	out := e.mustRun(t, args...)
	for _, f := range flags {
		if !strings.Contains(out, f[2]) {
			t.Fatalf("quota set %s %s: the output lacks %q:\n%s", f[0], f[1], f[2], out)
		}
	}
	var q adminclient.Quota
	e.mustJSON(t, &q, "quota", "set", "acme", "-user", "alice", "-max-terminals", "default")
	want := billing.SandboxQuota{MaxBackgroundProcesses: 1, MaxProcessLogBytes: 64 << 10, MaxFileWatches: -1, MaxTasks: 3,
		MaxPreviewURLs: 4}
	if q.SandboxQuota != want {
		t.Fatalf("quota set = %+v, want %+v", q.SandboxQuota, want)
	}
	if out := e.mustRun(t, "quota", "get", "acme", "-user", "alice"); !strings.Contains(out, "terminals        issuer default") {
		t.Fatalf("quota get after -max-terminals default:\n%s", out)
	}
	_, _, err := e.run(t, "quota", "set", "acme", "-user", "alice", "-max-process-log", "unlimited")
	if err == nil || !adminclient.IsCode(err, "invalid_argument") || !strings.Contains(err.Error(), "max_process_log_bytes") {
		t.Errorf("-max-process-log unlimited: %v, want invalid_argument naming max_process_log_bytes", err)
	}
	if _, _, err := e.run(t, "quota", "set", "acme", "-user", "alice", "-max-tasks", "0"); err == nil || !strings.Contains(err.Error(), "-max-tasks") {
		t.Errorf("-max-tasks 0: %v, want an error naming the flag", err)
	}
}

// A new user override needs no budget flags when the issuer has a default: it copies the budget and window
// and leaves the rest to the issuer's default (the README tour's line). Before, it asked for -ai-usd,
// -compute, -window and -max-sessions; without an issuer default it still does.
func TestAdminQuotaOverrideCopiesBudget(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	if _, _, err := e.run(t, "quota", "set", "acme", "-user", "alice", "-max-terminals", "2"); err == nil || !strings.Contains(err.Error(), "-ai-usd") {
		t.Fatalf("override without an issuer default: %v, want the budget flags asked for", err)
	}
	e.mustRun(t, "quota", "set", "acme", "-ai-usd", "5", "-compute", "24h", "-window", "day", "-max-sessions", "2", "-max-processes", "64", "-issuer-connects-per-minute", "50")
	var q adminclient.Quota
	e.mustJSON(t, &q, "quota", "set", "acme", "-user", "alice", "-max-terminals", "2", "-max-preview-urls", "5")
	want := billing.Quota{AIMicros: 5_000_000, ComputeSeconds: 86400, Window: billing.Day, MaxConcurrentSessions: 2, Revision: 1,
		SandboxQuota: billing.SandboxQuota{MaxTerminals: 2, MaxPreviewURLs: 5}}
	if q.Quota != want {
		t.Fatalf("override = %+v, want %+v", q.Quota, want)
	}
}

// api-keys: a key made by the CLI works as -admin-key for its own issuer's quotas, is refused for another
// issuer's, is listed without its secret, and is refused once revoked.
func TestAdminAPIKeys(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	e.mustRun(t, "issuers", "put", "beta")
	var k billing.NewAPIKey
	e.mustJSON(t, &k, "api-keys", "create", "acme", "-name", "backend")
	if k.Issuer != "acme" || k.Name != "backend" || !strings.HasPrefix(k.Secret, "wak_"+k.ID+"_") {
		t.Fatalf("api-keys create: %+v", k)
	}
	out := e.mustRun(t, "api-keys", "ls", "acme")
	if !strings.Contains(out, k.ID) || !strings.Contains(out, "backend") || strings.Contains(out, k.Secret) {
		t.Fatalf("api-keys ls:\n%s", out)
	}
	e.mustRun(t, "-admin-key", k.Secret, "quota", "set", "acme", "-ai-usd", "1", "-compute", "1h", "-window", "day", "-max-sessions", "2")
	if _, _, err := e.run(t, "-admin-key", k.Secret, "quota", "get", "beta"); err == nil || !strings.Contains(err.Error(), "permission_denied") {
		t.Fatalf("acme's key on beta's quota: %v, want permission_denied", err)
	}
	if out := e.mustRun(t, "api-keys", "revoke", "acme", k.ID); !strings.Contains(out, "revoked") {
		t.Fatalf("api-keys revoke: %q", out)
	}
	if _, _, err := e.run(t, "-admin-key", k.Secret, "quota", "get", "acme"); err == nil || !strings.Contains(err.Error(), "API key was rejected") {
		t.Fatalf("a revoked key: %v, want it rejected", err)
	}
}

func TestAdminIssuersDisable(t *testing.T) {
	e := newAdminEnv(t)
	e.mustRun(t, "issuers", "put", "acme")
	if out := e.mustRun(t, "issuers", "disable", "acme"); !strings.Contains(out, "issuer acme disabled") {
		t.Fatalf("issuers disable: %q", out)
	}
	var iss billing.Issuer
	e.mustJSON(t, &iss, "issuers", "enable", "acme")
	if iss.ID != "acme" || iss.Disabled {
		t.Fatalf("issuers enable -json: %+v", iss)
	}
	if _, _, err := e.run(t, "issuers", "disable", "ghost"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("disable an unregistered issuer: %v", err)
	}
}
