package billing_test

import (
	"context"
	"encoding/json"
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

// FuzzPutQuota sends arbitrary bodies to PUT /v1/quotas/acme and /v1/quotas/acme/users/alice, in process
// over a real SQLite ledger. Every answer is a quota or a PROTOCOL.md §6 error; an accepted quota is valid
// for its key (ValidateFor: no limit below -1, no issuer-wide field on an override) and is what GET
// answers afterwards. Revisions in the bodies are mostly stale, so many inputs end as conflicts: the
// parser runs first either way.
func FuzzPutQuota(f *testing.F) {
	for _, seed := range []string{
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0}`,
		`{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime","max_concurrent_sessions":-1,"revision":0,
			"max_issuer_sessions":10,"connects_per_minute":-1,"issuer_connects_per_minute":600,"prompts_per_minute":7}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"hour","max_concurrent_sessions":1,"revision":1,"max_issuer_sessions":-2}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"week","max_concurrent_sessions":1,"revision":2,"prompts_per_minute":1.5}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"month","max_concurrent_sessions":1,"revision":0,"connects_per_minute":null}`,
		`{"ai_microdollars":1,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"issuer_connects_per_minute":"5"}`,
		`{"ai_microdollars":9223372036854775807,"compute_seconds":1,"window":"day","max_concurrent_sessions":1,"revision":0,"prompts_per_minute":9223372036854775808}`,
		`{}`, `[]`, `null`, ``, `{"revision":0}{}`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	dir := f.TempDir()
	ledger, err := sqlite.New(context.Background(), filepath.Join(dir, "ledger.db"))
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
				t.Fatalf("status %d body %q: want a PROTOCOL.md §6 error other than internal", rec.Code, rec.Body)
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
