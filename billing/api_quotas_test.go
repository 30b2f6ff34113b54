package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/wire"
)

// FuzzPutQuota sends arbitrary bodies to PUT /v1/quotas/acme and /v1/quotas/acme/users/alice, in process over
// a real SQLite ledger. Every answer is a quota or a wire error (docs/PROTOCOL.md#errors); an accepted quota
// is valid for its key (ValidateFor: no limit below -1, no issuer-wide field on an override) and is what GET
// answers afterwards. Revisions in the bodies are mostly stale, so many inputs end as conflicts: the parser
// runs first either way.
func FuzzPutQuota(f *testing.F) {
	for _, seed := range []string{
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0}`,
		`{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime","max_concurrent_sessions":-1,"revision":0,
			"max_issuer_sessions":10,"connects_per_minute":-1,"issuer_connects_per_minute":600,"prompts_per_minute":7,
			"issuer_prompts_per_minute":300}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"hour","max_concurrent_sessions":1,"revision":1,"max_issuer_sessions":-2}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"week","max_concurrent_sessions":1,"revision":2,"prompts_per_minute":1.5}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"month","max_concurrent_sessions":1,"revision":0,"connects_per_minute":null}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"issuer_connects_per_minute":"5"}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"issuer_prompts_per_minute":300}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"issuer_prompts_per_minute":-1}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,
			"max_processes":64,"max_memory_bytes":1073741824,"cpu_millis":-1,"max_tmp_bytes":1048576,"max_workspace_bytes":-1,
			"max_concurrent_execs":2,"max_stored_bytes":5368709120}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,
			"max_background_processes":1,"max_process_log_bytes":-1,"max_file_watches":-1,"max_terminals":2,"max_tasks":3,"max_preview_urls":4}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"max_memory_bytes":16777215}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"max_processes":7}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"cpu_millis":-2}`,
		`{"ai_microdollars":9223372036854775807,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"prompts_per_minute":9223372036854775808}`,
		`{}`, `[]`, `null`, ``, `{"revision":0}{}`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	dir := f.TempDir()
	ledger, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ledger.Close() })
	if _, err := ledger.PutIssuer(context.Background(), "acme", ""); err != nil {
		f.Fatal(err)
	}
	store, err := file.Open(filepath.Join(dir, file.DefaultFileName))
	if err != nil {
		f.Fatal(err)
	}
	key, _, err := store.EnsureAdminKey()
	if err != nil {
		f.Fatal(err)
	}
	api, err := billing.NewAPI(billing.APIConfig{Store: ledger, Keys: store, AdminKeys: store.AdminKeys})
	if err != nil {
		f.Fatal(err)
	}
	serve := func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		return rec
	}
	f.Fuzz(func(t *testing.T, body string, user bool) {
		k, path := billing.QuotaKey{Issuer: "acme"}, "/v1/quotas/acme"
		if user {
			k.User, path = "alice", path+"/users/alice"
		}
		rec := serve(http.MethodPut, path, body)
		if rec.Code != http.StatusOK {
			var we wire.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &we); err != nil || !we.Code.Valid() || we.Code == wire.Internal {
				t.Fatalf("status %d body %q: want a wire error other than internal", rec.Code, rec.Body)
			}
			return
		}
		var got quotaJSON
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("answer %q: %v", rec.Body, err)
		}
		if err := got.Quota.ValidateFor(k); err != nil {
			t.Fatalf("accepted %q as %+v, which is invalid: %v", body, got.Quota, err)
		}
		var read quotaJSON
		if rec := serve(http.MethodGet, path, ""); rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &read) != nil || read != got {
			t.Fatalf("GET after PUT: %d %q, want %+v", rec.Code, rec.Body, got)
		}
	})
}

// issuer_prompts_per_minute is optional like the other admission fields: written on the issuer's default it
// round-trips through PUT, GET and the issuer's default_quota; left out it is answered as 0 (not set);
// below -1 or not an integer it is refused naming the field; on a user's override it is refused (even -1),
// naming the issuer's quota to set it on, and nothing is stored.
func TestAPIIssuerPromptsPerMinute(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	body := func(rev int, extra string) string {
		return fmt.Sprintf(`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":%d%s}`, rev, extra)
	}
	for _, tc := range []struct{ name, extra string }{
		{"below -1", `,"issuer_prompts_per_minute":-2`},
		{"fraction", `,"issuer_prompts_per_minute":2.5`},
		{"string", `,"issuer_prompts_per_minute":"5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.expectError(t, "PUT", "/v1/quotas/acme", body(0, tc.extra), http.StatusBadRequest, wire.InvalidArgument,
				"issuer_prompts_per_minute")
		})
	}

	var got quotaJSON
	e.mustPutDefault(t, body(0, `,"issuer_prompts_per_minute":300`), billing.Quota{AIMicros: 1, ComputeSeconds: 1,
		Window: billing.Day, MaxConcurrentSessions: 1, IssuerPromptsPerMinute: 300, Revision: 1})
	e.call(t, "PUT", "/v1/quotas/acme", body(1, `,"issuer_prompts_per_minute":-1`), &got)
	if got.IssuerPromptsPerMinute != billing.Unlimited || got.Revision != 2 {
		t.Fatalf("PUT unlimited = %+v", got)
	}

	r := e.call(t, "PUT", "/v1/quotas/acme", body(2, ""), &got)
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	if v, ok := raw["issuer_prompts_per_minute"]; !ok || v != float64(0) {
		t.Fatalf("answer's issuer_prompts_per_minute = %v (present %v), want 0", v, ok)
	}

	for _, v := range []string{"5", "-1"} {
		we := e.expectError(t, "PUT", "/v1/quotas/acme/users/alice", body(0, `,"issuer_prompts_per_minute":`+v),
			http.StatusBadRequest, wire.InvalidArgument, "issuer_prompts_per_minute")
		if !strings.Contains(we.Message, "/v1/quotas/acme") {
			t.Fatalf("message %q does not say where to set it", we.Message)
		}
	}
	if _, err := e.ledger.GetQuota(context.Background(), billing.QuotaKey{Issuer: "acme", User: "alice"}); err == nil {
		t.Fatal("a refused override was stored")
	}
}

// The sandbox limits are optional like the admission fields and allowed on a user's override too: written
// they round-trip through PUT, GET and the issuer's default_quota; left out they are answered as 0 (not
// set); below -1, positive but below the field's minimum, or not an integer they are refused naming the
// field, and nothing is stored.
func TestAPISandboxLimits(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	body := func(rev int, extra string) string {
		return fmt.Sprintf(`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":%d%s}`, rev, extra)
	}
	for _, tc := range []struct{ field, value string }{
		{"max_processes", "-2"},
		{"max_processes", "7"},
		{"max_memory_bytes", "16777215"},
		{"max_memory_bytes", "1.5"},
		{"cpu_millis", "9"},
		{"max_tmp_bytes", "1024"},
		{"max_workspace_bytes", `"1GiB"`},
		{"max_concurrent_execs", "-5"},
		{"max_stored_bytes", "1"},
		{"max_background_processes", "-2"},
		{"max_process_log_bytes", "-1"},
		{"max_process_log_bytes", "4095"},
		{"max_process_log_bytes", "67108865"},
		{"max_file_watches", "-2"},
		{"max_terminals", "1.5"},
		{"max_tasks", "-3"},
		{"max_preview_urls", `"5"`},
	} {
		t.Run(tc.field+"="+tc.value, func(t *testing.T) {
			for _, path := range []string{"/v1/quotas/acme", "/v1/quotas/acme/users/alice"} {
				e.expectError(t, "PUT", path, body(0, `,"`+tc.field+`":`+tc.value), http.StatusBadRequest, wire.InvalidArgument,
					tc.field)
			}
		})
	}
	for _, k := range []billing.QuotaKey{{Issuer: "acme"}, {Issuer: "acme", User: "alice"}} {
		if _, err := e.ledger.GetQuota(context.Background(), k); err == nil {
			t.Fatalf("a refused quota was stored under %+v", k)
		}
	}

	all := `,"max_processes":64,"max_memory_bytes":1073741824,"cpu_millis":1500,"max_tmp_bytes":1048576,` +
		`"max_workspace_bytes":-1,"max_concurrent_execs":2,"max_stored_bytes":5368709120,` +
		`"max_background_processes":1,"max_process_log_bytes":65536,"max_file_watches":-1,"max_terminals":2,"max_tasks":3,` +
		`"max_preview_urls":4`
	e.mustPutDefault(t, body(0, all), billing.Quota{AIMicros: 1, ComputeSeconds: 1, Window: billing.Day,
		MaxConcurrentSessions: 1, Revision: 1, SandboxQuota: billing.SandboxQuota{MaxProcesses: 64, MaxMemoryBytes: 1 << 30,
			CPUMillis: 1500, MaxTmpBytes: 1 << 20, MaxWorkspaceBytes: -1, MaxConcurrentExecs: 2, MaxStoredBytes: 5 << 30,
			MaxBackgroundProcesses: 1, MaxProcessLogBytes: 64 << 10, MaxFileWatches: -1, MaxTerminals: 2, MaxTasks: 3,
			MaxPreviewURLs: 4}})

	var got quotaJSON

	e.call(t, "PUT", "/v1/quotas/acme/users/alice", body(0, `,"max_memory_bytes":16777216,"cpu_millis":-1`), &got)
	wantUser := quotaJSON{Issuer: "acme", User: "alice", Quota: billing.Quota{AIMicros: 1, ComputeSeconds: 1, Window: billing.Day,
		MaxConcurrentSessions: 1, Revision: 1, SandboxQuota: billing.SandboxQuota{MaxMemoryBytes: 16 << 20, CPUMillis: -1}}}
	if got != wantUser {
		t.Fatalf("PUT override = %+v, want %+v", got, wantUser)
	}
	if e.call(t, "GET", "/v1/quotas/acme/users/alice", "", &got); got != wantUser {
		t.Fatalf("GET override = %+v, want %+v", got, wantUser)
	}

	r := e.call(t, "PUT", "/v1/quotas/acme", body(1, ""), &got)
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"max_processes", "max_memory_bytes", "cpu_millis", "max_tmp_bytes", "max_workspace_bytes",
		"max_concurrent_execs", "max_stored_bytes", "max_background_processes", "max_process_log_bytes", "max_file_watches",
		"max_terminals", "max_tasks", "max_preview_urls"} {
		if v, ok := raw[f]; !ok || v != float64(0) {
			t.Errorf("answer's %s = %v (present %v), want 0", f, v, ok)
		}
	}
}

// mustPutDefault PUTs body as acme's default quota and checks that the answer, GET and the issuer's
// default_quota are all want.
func (e *apiEnv) mustPutDefault(t *testing.T, body string, want billing.Quota) {
	t.Helper()
	var got quotaJSON
	if e.call(t, "PUT", "/v1/quotas/acme", body, &got); got != (quotaJSON{Issuer: "acme", Quota: want}) {
		t.Fatalf("PUT = %+v, want %+v", got, want)
	}
	if e.call(t, "GET", "/v1/quotas/acme", "", &got); got != (quotaJSON{Issuer: "acme", Quota: want}) {
		t.Fatalf("GET = %+v, want %+v", got, want)
	}
	var iss issuerJSON
	if e.call(t, "GET", "/v1/issuers/acme", "", &iss); iss.DefaultQuota == nil || *iss.DefaultQuota != want {
		t.Fatalf("GET issuer default_quota = %+v, want %+v", iss.DefaultQuota, want)
	}
}

// The OpenAPI schemas of a quota (answered and written) document every field of billing.Quota.
func TestOpenAPIQuotaFields(t *testing.T) {
	e := newAPIEnv(t)
	r := e.call(t, "GET", "/v1/openapi.json", "", nil)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(billing.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"QuotaFields", "QuotaPut"} {
		for f := range fields {
			if _, ok := doc.Components.Schemas[schema].Properties[f]; !ok {
				t.Errorf("OpenAPI schema %s does not document %s", schema, f)
			}
		}
	}
}

// TestAPIDeletes: DELETE removes a quota at the revision read (a stale or missing one is refused, with the
// field named) and a price override; what is not there is not_found.
func TestAPIDeletes(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	body := `{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":%d}`
	e.call(t, "PUT", "/v1/quotas/acme", fmt.Sprintf(body, 0), nil)
	e.call(t, "PUT", "/v1/quotas/acme/users/alice", fmt.Sprintf(body, 0), nil)
	e.call(t, "PUT", "/v1/quotas/acme/users/alice", fmt.Sprintf(body, 1), nil)
	for _, q := range []string{"", "?revision=0", "?revision=x", "?revision=2&revision=2", "?rev=2"} {
		field := "revision"
		if q == "?rev=2" {
			field = "rev"
		}
		e.expectError(t, "DELETE", "/v1/quotas/acme/users/alice"+q, "", http.StatusBadRequest, wire.InvalidArgument, field)
	}
	e.expectError(t, "DELETE", "/v1/quotas/acme/users/alice?revision=1", "", http.StatusConflict, wire.Conflict, "revision")
	if r := e.call(t, "DELETE", "/v1/quotas/acme/users/alice?revision=2", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE alice's quota: status %d", r.status)
	}
	e.expectError(t, "GET", "/v1/quotas/acme/users/alice", "", http.StatusNotFound, wire.NotFound, "")
	e.expectError(t, "DELETE", "/v1/quotas/acme/users/alice?revision=2", "", http.StatusNotFound, wire.NotFound, "")
	var def quotaJSON
	e.call(t, "GET", "/v1/quotas/acme", "", &def)
	if def.Revision != 1 {
		t.Fatalf("the issuer's default after alice's delete: %+v", def)
	}
	e.call(t, "DELETE", "/v1/quotas/acme?revision=1", "", nil)
	e.expectError(t, "GET", "/v1/quotas/acme", "", http.StatusNotFound, wire.NotFound, "")

	e.call(t, "PUT", "/v1/prices/acme-model", `{"input":1,"output":2,"cache_read":0,"cache_creation":0}`, nil)
	if r := e.call(t, "DELETE", "/v1/prices/acme-model", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE the price: status %d", r.status)
	}
	var p struct{ Custom bool }
	if e.call(t, "GET", "/v1/prices/acme-model", "", &p); p.Custom {
		t.Fatal("the override is still there after its delete")
	}
	e.expectError(t, "DELETE", "/v1/prices/acme-model", "", http.StatusNotFound, wire.NotFound, "")
	e.expectError(t, "DELETE", "/v1/prices/%00", "", http.StatusBadRequest, wire.InvalidArgument, "model")
}
