package billing_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/sqlitedb"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// apiEnv is the billing API over a real SQLite ledger and a real secrets file, served on 127.0.0.1.
type apiEnv struct {
	url      string
	ledger   *sqlite.Ledger
	dbPath   string
	secrets  *file.Store
	adminKey string
	logs     *syncBuffer
	metrics  *prometheus.Registry
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newAPIEnv(t *testing.T) *apiEnv {
	t.Helper()
	return newAPIEnvWith(t, func(*billing.APIConfig) {})
}

// newAPIEnvWith is newAPIEnv with the API's configuration changed by edit first.
func newAPIEnvWith(t *testing.T, edit func(*billing.APIConfig)) *apiEnv {
	t.Helper()
	dir := t.TempDir()
	e := &apiEnv{dbPath: filepath.Join(dir, "ledger.db"), logs: &syncBuffer{}, metrics: prometheus.NewRegistry()}
	var err error
	if e.ledger, err = sqlite.New(context.Background(), sqlite.Config{Path: e.dbPath}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ledger.Close() })
	if e.secrets, err = file.Open(filepath.Join(dir, file.DefaultFileName)); err != nil {
		t.Fatal(err)
	}
	if e.adminKey, _, err = e.secrets.EnsureAdminKey(); err != nil {
		t.Fatal(err)
	}
	cfg := billing.APIConfig{
		Store: e.ledger, Keys: e.secrets, AdminKeys: e.secrets.AdminKeys, Metrics: e.metrics,
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	edit(&cfg)
	api, err := billing.NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// request is one call; an empty key sends no Authorization header.
type request struct {
	method, path string
	body         string
	key          string
	header       map[string]string
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) err(t testing.TB) *wire.Error {
	t.Helper()
	var we wire.Error
	if err := json.Unmarshal(r.body, &we); err != nil || !we.Code.Valid() {
		t.Fatalf("status %d body %q is not a wire error (docs/PROTOCOL.md#errors)", r.status, r.body)
	}
	return &we
}

func (e *apiEnv) send(t testing.TB, rq request) response {
	t.Helper()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	req, err := http.NewRequest(rq.method, e.url+rq.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if rq.key != "" {
		req.Header.Set("Authorization", "Bearer "+rq.key)
	}
	for k, v := range rq.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// call sends an authenticated request and decodes a 2xx JSON answer into out (when not nil); any other
// status fails the test.
func (e *apiEnv) call(t testing.TB, method, path, body string, out any) response {
	t.Helper()
	r := e.send(t, request{method: method, path: path, body: body, key: e.adminKey})
	if r.status/100 != 2 {
		t.Fatalf("%s %s: status %d: %s", method, path, r.status, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, r.body, err)
		}
	}
	return r
}

// expectError sends an authenticated request and checks the error's status, code and details.field.
func (e *apiEnv) expectError(t testing.TB, method, path, body string, status int, code wire.Code, field string) *wire.Error {
	t.Helper()
	r := e.send(t, request{method: method, path: path, body: body, key: e.adminKey})
	we := r.err(t)
	if r.status != status || we.Code != code {
		t.Fatalf("%s %s: %d %s (%s), want %d %s", method, path, r.status, we.Code, we.Message, status, code)
	}
	if got, _ := we.Details["field"].(string); got != field {
		t.Fatalf("%s %s: details.field %q, want %q (%s)", method, path, got, field, we.Message)
	}
	return we
}

// routePath turns a route pattern into a request path with valid values.
func routePath(pattern string) string {
	return strings.NewReplacer("{iss}", "acme", "{sub}", "alice", "{model}", "claude-sonnet-4-5", "{id}", "ak0123456789abcdef").Replace(pattern)
}

func TestAPIAuth(t *testing.T) {
	e := newAPIEnv(t)
	paths := billing.Routes()
	paths = append(paths, "GET /v1/nope", "DELETE /v1/issuers/acme")
	for _, rt := range paths {
		method, pattern, _ := strings.Cut(rt, " ")
		for _, tc := range []struct {
			name   string
			header string
		}{
			{"missing", ""},
			{"empty bearer", "Bearer "},
			{"wrong scheme", "Basic " + e.adminKey},
			{"wrong key", "Bearer wak_not-the-key"},
			{"key with a space", "Bearer " + e.adminKey[:6] + " " + e.adminKey[6:]},
			{"key prefix", "Bearer " + e.adminKey[:len(e.adminKey)-1]},
			{"key with suffix", "Bearer " + e.adminKey + "x"},
		} {
			t.Run(rt+"/"+tc.name, func(t *testing.T) {
				rq := request{method: method, path: routePath(pattern), body: "{}"}
				if tc.header != "" {
					rq.header = map[string]string{"Authorization": tc.header}
				}
				r := e.send(t, rq)
				if we := r.err(t); r.status != http.StatusUnauthorized || we.Code != wire.Unauthenticated {
					t.Fatalf("status %d code %s, want 401 unauthenticated", r.status, we.Code)
				}
			})
		}
	}
	if strings.Contains(e.logs.String(), e.adminKey[4:]) {
		t.Fatal("the admin key reached the log")
	}
	// Keys are read on every request: a key written later works at once. A lowercase scheme is fine.
	r := e.send(t, request{method: "GET", path: "/v1/issuers", header: map[string]string{"Authorization": "bearer " + e.adminKey}})
	if r.status != http.StatusOK {
		t.Fatalf("lowercase bearer: %d %s", r.status, r.body)
	}
	// The scheme in any case, tabs and spaces around the key (docs/PROTOCOL.md#auth-header).
	for _, h := range []string{"BEARER " + e.adminKey, "bEaReR\t" + e.adminKey + " "} {
		if r := e.send(t, request{method: "GET", path: "/v1/issuers", header: map[string]string{"Authorization": h}}); r.status != http.StatusOK {
			t.Fatalf("%q: %d %s", h, r.status, r.body)
		}
	}
	// With the key, unknown routes are not_found and wrong methods invalid_argument with Allow, in the one
	// error shape (docs/PROTOCOL.md#errors: the same rule as every role's).
	for _, path := range []string{"/", "/nope", "/v1/nope"} {
		e.expectError(t, "GET", path, "", http.StatusNotFound, wire.NotFound, "")
	}
	r = e.send(t, request{method: "DELETE", path: "/v1/issuers/acme", key: e.adminKey})
	if we := r.err(t); r.status != http.StatusBadRequest || we.Code != wire.InvalidArgument || r.header.Get("Allow") != "GET, PUT" {
		t.Fatalf("DELETE: %d %s, Allow %q", r.status, we.Code, r.header.Get("Allow"))
	}
}

// The request id rule of every role (docs/PROTOCOL.md#request-id): a client's id of the rule is kept and
// echoed, any other replaced, on errors as on answers.
func TestAPIRequestID(t *testing.T) {
	e := newAPIEnv(t)
	for sent, kept := range map[string]bool{"trace-1.2:3_x": true, strings.Repeat("a", 64): true, strings.Repeat("a", 65): false, "a b": false} {
		for _, key := range []string{e.adminKey, ""} {
			r := e.send(t, request{method: "GET", path: "/v1/issuers", key: key, header: map[string]string{"X-Request-Id": sent}})
			if got := r.header.Get("X-Request-Id"); (got == sent) != kept || got == "" {
				t.Errorf("sent %q (key %v): status %d, echoed %q", sent, key != "", r.status, got)
			}
		}
	}
}

func TestAPIAdminKeysUnavailable(t *testing.T) {
	e := newAPIEnv(t)
	api, err := billing.NewAPI(billing.APIConfig{Store: e.ledger, Keys: e.secrets,
		AdminKeys: func(context.Context) ([]string, error) { return nil, fmt.Errorf("read: %w", secrets.ErrUnavailable) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	e.url = srv.URL
	r := e.send(t, request{method: "GET", path: "/v1/issuers", key: e.adminKey})
	if we := r.err(t); r.status != http.StatusServiceUnavailable || we.Code != wire.Unavailable {
		t.Fatalf("%d %s, want 503 unavailable", r.status, we.Code)
	}
	// No keys at all: nothing authenticates.
	api, _ = billing.NewAPI(billing.APIConfig{Store: e.ledger, Keys: e.secrets,
		AdminKeys: func(context.Context) ([]string, error) { return []string{""}, nil }})
	srv2 := httptest.NewServer(api)
	defer srv2.Close()
	e.url = srv2.URL
	for _, key := range []string{"", " "} {
		r := e.send(t, request{method: "GET", path: "/v1/issuers", header: map[string]string{"Authorization": "Bearer " + key}})
		if r.status != http.StatusUnauthorized {
			t.Fatalf("empty key list, key %q: %d", key, r.status)
		}
	}
	if _, err := billing.NewAPI(billing.APIConfig{Store: e.ledger}); err == nil {
		t.Fatal("NewAPI without keys and admin keys succeeded")
	}
}

type issuerJSON struct {
	ID           string         `json:"iss"`
	Name         string         `json:"name"`
	Created      time.Time      `json:"created"`
	DefaultQuota *billing.Quota `json:"default_quota"`
}

func TestAPIIssuers(t *testing.T) {
	e := newAPIEnv(t)
	var list struct{ Issuers []issuerJSON }
	r := e.call(t, "GET", "/v1/issuers", "", &list)
	if list.Issuers == nil || len(list.Issuers) != 0 || !bytes.Contains(r.body, []byte(`"issuers":[]`)) {
		t.Fatalf("empty list: %s", r.body)
	}
	e.expectError(t, "GET", "/v1/issuers/acme", "", http.StatusNotFound, wire.NotFound, "")

	var acme issuerJSON
	e.call(t, "PUT", "/v1/issuers/acme", `{"name":"Acme"}`, &acme)
	if acme.ID != "acme" || acme.Name != "Acme" || acme.Created.IsZero() || acme.DefaultQuota != nil {
		t.Fatalf("PUT = %+v", acme)
	}
	var renamed issuerJSON
	e.call(t, "PUT", "/v1/issuers/acme", `{"name":"Acme Corp"}`, &renamed)
	if renamed.Name != "Acme Corp" || !renamed.Created.Equal(acme.Created) {
		t.Fatalf("rename = %+v", renamed)
	}
	e.call(t, "PUT", "/v1/issuers/"+url.PathEscape("b é/x"), `{}`, nil)
	e.call(t, "PUT", "/v1/quotas/acme", `{"ai_microdollars":5,"compute_seconds":6,"window":"week","max_concurrent_sessions":2,"revision":0}`, nil)
	var got issuerJSON
	e.call(t, "GET", "/v1/issuers/acme", "", &got)
	want := billing.Quota{AIMicros: 5, ComputeSeconds: 6, Window: billing.Week, MaxConcurrentSessions: 2, Revision: 1}
	if got.DefaultQuota == nil || *got.DefaultQuota != want {
		t.Fatalf("GET issuer default_quota %+v, want %+v", got.DefaultQuota, want)
	}
	e.call(t, "GET", "/v1/issuers", "", &list)
	if len(list.Issuers) != 2 || list.Issuers[0].ID != "acme" || list.Issuers[1].ID != "b é/x" || list.Issuers[1].Name != "" {
		t.Fatalf("list = %+v", list.Issuers)
	}
}

func TestAPIKeyRotation(t *testing.T) {
	e := newAPIEnv(t)
	e.expectError(t, "POST", "/v1/issuers/acme/keys", "", http.StatusNotFound, wire.NotFound, "")
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)

	verifier := token.NewVerifier(e.secrets, token.VerifierOptions{})
	// The secret is a text string signed with as given, as a customer's JWT library does with a string
	// secret (golang-jwt here): never base64-decoded.
	mint := func(t *testing.T, kid, secret string) string {
		t.Helper()
		if !secrets.ValidTextSecret(secret) || !strings.HasPrefix(secret, "wsk_") {
			t.Fatalf("secret of %d chars is not a wsk_ text secret", len(secret))
		}
		now := time.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "acme", "sub": "alice", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var secretsSeen []string
	var tokens []string
	for i, wantKid := range []string{"acme-v1", "acme-v2"} {
		var k struct{ Kid, Secret string }
		r := e.call(t, "POST", "/v1/issuers/acme/keys", "", &k)
		if r.status != http.StatusCreated || k.Kid != wantKid || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("rotation %d: %d kid %q cache %q", i, r.status, k.Kid, r.header.Get("Cache-Control"))
		}
		secretsSeen = append(secretsSeen, k.Secret)
		tok := mint(t, k.Kid, k.Secret)
		c, err := verifier.Verify(context.Background(), tok)
		if err != nil || c.Issuer != "acme" {
			t.Fatalf("token signed with the returned %s secret: %v", k.Kid, err)
		}
		tokens = append(tokens, tok)
	}
	if secretsSeen[0] == secretsSeen[1] {
		t.Fatal("rotation returned the same secret twice")
	}
	// The previous version stays accepted during the rotation.
	if _, err := verifier.Verify(context.Background(), tokens[0]); err != nil {
		t.Fatalf("token of the previous key: %v", err)
	}
	// Not even the secret's text reaches the log; the key id does.
	logs := e.logs.String()
	for _, s := range secretsSeen {
		if strings.Contains(logs, s) {
			t.Fatal("a secret reached the log")
		}
	}
	if !strings.Contains(logs, "acme-v2") {
		t.Fatalf("the rotation was not logged with its kid:\n%s", logs)
	}
}

const quotaBody = `{"ai_microdollars":%d,"compute_seconds":3600,"window":"day","max_concurrent_sessions":-1,"revision":%d}`

type quotaJSON struct {
	Issuer string `json:"iss"`
	User   string `json:"sub"`
	billing.Quota
}

func TestAPIQuotas(t *testing.T) {
	e := newAPIEnv(t)
	for _, path := range []string{"/v1/quotas/acme", "/v1/quotas/acme/users/alice"} {
		e.expectError(t, "PUT", path, fmt.Sprintf(quotaBody, 1, 0), http.StatusNotFound, wire.NotFound, "")
	}
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	for _, tc := range []struct{ path, user string }{{"/v1/quotas/acme", ""}, {"/v1/quotas/acme/users/alice", "alice"}} {
		t.Run(tc.path, func(t *testing.T) {
			e.expectError(t, "GET", tc.path, "", http.StatusNotFound, wire.NotFound, "")
			var q quotaJSON
			e.call(t, "PUT", tc.path, fmt.Sprintf(quotaBody, 5_000_000, 0), &q)
			want := quotaJSON{Issuer: "acme", User: tc.user, Quota: billing.Quota{AIMicros: 5_000_000, ComputeSeconds: 3600,
				Window: billing.Day, MaxConcurrentSessions: -1, Revision: 1}}
			if q != want {
				t.Fatalf("PUT = %+v, want %+v", q, want)
			}
			// A second writer that also read "no quota" loses.
			we := e.expectError(t, "PUT", tc.path, fmt.Sprintf(quotaBody, 9, 0), http.StatusConflict, wire.Conflict, "revision")
			if cur, _ := we.Details["current_revision"].(float64); cur != 1 {
				t.Fatalf("conflict details %v, want current_revision 1", we.Details)
			}
			e.call(t, "PUT", tc.path, fmt.Sprintf(quotaBody, 7, 1), &q)
			if q.Revision != 2 || q.AIMicros != 7 {
				t.Fatalf("second PUT = %+v", q)
			}
			e.expectError(t, "PUT", tc.path, fmt.Sprintf(quotaBody, 8, 1), http.StatusConflict, wire.Conflict, "revision")
			e.expectError(t, "PUT", tc.path, fmt.Sprintf(quotaBody, 8, 5), http.StatusConflict, wire.Conflict, "revision")
			var got quotaJSON
			e.call(t, "GET", tc.path, "", &got)
			if got != q {
				t.Fatalf("GET = %+v, want %+v", got, q)
			}
		})
	}
	we := e.expectError(t, "GET", "/v1/quotas/acme/users/bob", "", http.StatusNotFound, wire.NotFound, "")
	if !strings.Contains(we.Message, "issuer's applies") {
		t.Fatalf("message %q does not say the issuer's quota applies", we.Message)
	}
}

// The admission fields are optional: written, they round-trip through PUT, GET and the issuer's
// default_quota; left out, they are stored and answered as 0 (not set). A user's override takes the
// per-user rates.
func TestAPIQuotaAdmissionFields(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	var q quotaJSON
	e.call(t, "PUT", "/v1/quotas/acme", `{"ai_microdollars":-1,"compute_seconds":-1,"window":"day","max_concurrent_sessions":2,
		"max_issuer_sessions":10,"connects_per_minute":-1,"issuer_connects_per_minute":600,"prompts_per_minute":7,"revision":0}`, &q)
	want := quotaJSON{Issuer: "acme", Quota: billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Day,
		MaxConcurrentSessions: 2, MaxIssuerSessions: 10, ConnectsPerMinute: -1, IssuerConnectsPerMinute: 600,
		PromptsPerMinute: 7, Revision: 1}}
	if q != want {
		t.Fatalf("PUT = %+v, want %+v", q, want)
	}
	var got quotaJSON
	if e.call(t, "GET", "/v1/quotas/acme", "", &got); got != want {
		t.Fatalf("GET = %+v, want %+v", got, want)
	}
	var iss issuerJSON
	if e.call(t, "GET", "/v1/issuers/acme", "", &iss); iss.DefaultQuota == nil || *iss.DefaultQuota != want.Quota {
		t.Fatalf("GET issuer default_quota = %+v, want %+v", iss.DefaultQuota, want.Quota)
	}

	// Left out: not set, and answered as 0 (the fields are always present).
	r := e.call(t, "PUT", "/v1/quotas/acme", fmt.Sprintf(quotaBody, 5, 1), &got)
	want.Quota = billing.Quota{AIMicros: 5, ComputeSeconds: 3600, Window: billing.Day, MaxConcurrentSessions: -1, Revision: 2}
	if got != want {
		t.Fatalf("PUT without the admission fields = %+v, want %+v", got, want)
	}
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"max_issuer_sessions", "connects_per_minute", "issuer_connects_per_minute", "prompts_per_minute"} {
		if v, ok := raw[k]; !ok || v != float64(0) {
			t.Errorf("answer's %s = %v (present %v), want 0", k, v, ok)
		}
	}

	e.call(t, "PUT", "/v1/quotas/acme/users/alice", `{"ai_microdollars":1,"compute_seconds":1,"window":"hour",
		"max_concurrent_sessions":1,"connects_per_minute":3,"prompts_per_minute":-1,"max_issuer_sessions":0,"revision":0}`, &got)
	wantUser := quotaJSON{Issuer: "acme", User: "alice", Quota: billing.Quota{AIMicros: 1, ComputeSeconds: 1, Window: billing.Hour,
		MaxConcurrentSessions: 1, ConnectsPerMinute: 3, PromptsPerMinute: -1, Revision: 1}}
	if got != wantUser {
		t.Fatalf("PUT override = %+v, want %+v", got, wantUser)
	}
	if e.call(t, "GET", "/v1/quotas/acme/users/alice", "", &got); got != wantUser {
		t.Fatalf("GET override = %+v, want %+v", got, wantUser)
	}
	// The issuer-wide fields are refused on an override, naming the issuer's quota to set them on.
	we := e.expectError(t, "PUT", "/v1/quotas/acme/users/alice", `{"ai_microdollars":1,"compute_seconds":1,"window":"hour",
		"max_concurrent_sessions":1,"max_issuer_sessions":3,"revision":1}`, http.StatusBadRequest, wire.InvalidArgument, "max_issuer_sessions")
	if !strings.Contains(we.Message, "/v1/quotas/acme") {
		t.Fatalf("message %q does not say where to set it", we.Message)
	}
}

func TestAPIValidation(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	quota := func(drop, set string) string {
		m := map[string]any{"ai_microdollars": 1, "compute_seconds": 1, "window": "day", "max_concurrent_sessions": 1, "revision": 0}
		delete(m, drop)
		if set != "" {
			k, v, _ := strings.Cut(set, "=")
			var val any
			if err := json.Unmarshal([]byte(v), &val); err != nil {
				t.Fatal(err)
			}
			m[k] = val
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	price := func(drop, set string) string {
		m := map[string]any{"input": 1, "output": 1, "cache_read": 1, "cache_creation": 1}
		delete(m, drop)
		if k, v, ok := strings.Cut(set, "="); ok {
			m[k] = json.RawMessage(v)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	usage := func(q string) string { return "/v1/usage?" + q }
	const rng = "from=2030-01-01&to=2030-02-01"
	for _, tc := range []struct {
		name, method, path, body string
		field                    string
	}{
		{"issuer control char", "GET", "/v1/issuers/a%7Fb", "", "iss"},
		{"issuer too long", "GET", "/v1/issuers/" + strings.Repeat("x", 257), "", "iss"},
		{"issuer bad name", "PUT", "/v1/issuers/acme", `{"name":"a\u0000b"}`, "name"},
		{"issuer name type", "PUT", "/v1/issuers/acme", `{"name":5}`, "name"},
		{"issuer unknown field", "PUT", "/v1/issuers/acme", `{"nmae":"x"}`, "nmae"},
		{"issuer name twice", "PUT", "/v1/issuers/acme", `{"name":"a","name":"b"}`, "name"},
		{"issuer Name is not name", "PUT", "/v1/issuers/acme", `{"name":"a","Name":"b"}`, "Name"},
		{"quota field twice", "PUT", "/v1/quotas/acme", strings.Replace(quota("", ""), `"ai_microdollars":`, `"ai_microdollars":1,"ai_microdollars":`, 1), "ai_microdollars"},
		{"quota AI_MICRODOLLARS is not ai_microdollars", "PUT", "/v1/quotas/acme", quota("", "AI_MICRODOLLARS=-1"), "AI_MICRODOLLARS"},
		{"issuer default_quota is read-only", "PUT", "/v1/issuers/acme", `{"default_quota":{}}`, "default_quota"},
		{"empty body", "PUT", "/v1/issuers/acme", "", ""},
		{"not an object", "PUT", "/v1/issuers/acme", `[]`, ""},
		{"not json", "PUT", "/v1/issuers/acme", `{"name":`, ""},
		{"two values", "PUT", "/v1/issuers/acme", `{} {}`, ""},
		{"rotate bad issuer", "POST", "/v1/issuers/a%00/keys", "", "iss"},
		{"quota bad issuer", "GET", "/v1/quotas/a%0A", "", "iss"},
		{"quota bad user", "PUT", "/v1/quotas/acme/users/a%0A", quota("", ""), "sub"},
		{"quota no ai", "PUT", "/v1/quotas/acme", quota("ai_microdollars", ""), "ai_microdollars"},
		{"quota no compute", "PUT", "/v1/quotas/acme", quota("compute_seconds", ""), "compute_seconds"},
		{"quota no window", "PUT", "/v1/quotas/acme", quota("window", ""), "window"},
		{"quota no sessions", "PUT", "/v1/quotas/acme", quota("max_concurrent_sessions", ""), "max_concurrent_sessions"},
		{"quota no revision", "PUT", "/v1/quotas/acme", quota("revision", ""), "revision"},
		{"quota ai below -1", "PUT", "/v1/quotas/acme", quota("", "ai_microdollars=-2"), "ai_microdollars"},
		{"quota compute below -1", "PUT", "/v1/quotas/acme/users/u", quota("", "compute_seconds=-2"), "compute_seconds"},
		{"quota sessions below -1", "PUT", "/v1/quotas/acme", quota("", "max_concurrent_sessions=-9"), "max_concurrent_sessions"},
		{"quota ai fraction", "PUT", "/v1/quotas/acme", quota("", "ai_microdollars=1.5"), "ai_microdollars"},
		{"quota ai string", "PUT", "/v1/quotas/acme", quota("", `ai_microdollars="5"`), "ai_microdollars"},
		{"quota bad window", "PUT", "/v1/quotas/acme", quota("", `window="year"`), "window"},
		{"quota negative revision", "PUT", "/v1/quotas/acme", quota("", "revision=-1"), "revision"},
		{"quota unknown field", "PUT", "/v1/quotas/acme", quota("", "iss=1"), "iss"},
		{"quota issuer sessions below -1", "PUT", "/v1/quotas/acme", quota("", "max_issuer_sessions=-2"), "max_issuer_sessions"},
		{"quota connects below -1", "PUT", "/v1/quotas/acme/users/u", quota("", "connects_per_minute=-3"), "connects_per_minute"},
		{"quota issuer connects below -1", "PUT", "/v1/quotas/acme", quota("", "issuer_connects_per_minute=-2"), "issuer_connects_per_minute"},
		{"quota prompts below -1", "PUT", "/v1/quotas/acme", quota("", "prompts_per_minute=-100"), "prompts_per_minute"},
		{"quota prompts fraction", "PUT", "/v1/quotas/acme", quota("", "prompts_per_minute=1.5"), "prompts_per_minute"},
		{"quota prompts string", "PUT", "/v1/quotas/acme", quota("", `prompts_per_minute="5"`), "prompts_per_minute"},
		{"quota issuer sessions on a user", "PUT", "/v1/quotas/acme/users/u", quota("", "max_issuer_sessions=2"), "max_issuer_sessions"},
		{"quota issuer sessions unlimited on a user", "PUT", "/v1/quotas/acme/users/u", quota("", "max_issuer_sessions=-1"), "max_issuer_sessions"},
		{"quota issuer connects on a user", "PUT", "/v1/quotas/acme/users/u", quota("", "issuer_connects_per_minute=5"), "issuer_connects_per_minute"},
		{"price bad model", "PUT", "/v1/prices/a%09b", price("", ""), "model"},
		{"price get bad model", "GET", "/v1/prices/a%09b", "", "model"},
		{"price no input", "PUT", "/v1/prices/m", price("input", ""), "input"},
		{"price no output", "PUT", "/v1/prices/m", price("output", ""), "output"},
		{"price no cache_read", "PUT", "/v1/prices/m", price("cache_read", ""), "cache_read"},
		{"price no cache_creation", "PUT", "/v1/prices/m", price("cache_creation", ""), "cache_creation"},
		{"price negative", "PUT", "/v1/prices/m", price("", "output=-1"), "output"},
		{"price too high", "PUT", "/v1/prices/m", price("", "cache_read=1000000000001"), "cache_read"},
		{"usage no from", "GET", usage("to=2030-01-01"), "", "from"},
		{"usage no to", "GET", usage("from=2030-01-01"), "", "to"},
		{"usage bad from", "GET", usage("from=yesterday&to=2030-01-01"), "", "from"},
		{"usage bad to", "GET", usage("from=2030-01-01&to=2030-13-01"), "", "to"},
		{"usage empty range", "GET", usage("from=2030-01-01&to=2030-01-01T00:00:00Z"), "", "to"},
		{"usage reversed", "GET", usage("from=2030-02-01&to=2030-01-01"), "", "to"},
		{"usage bad group", "GET", usage(rng + "&group_by=week"), "", "group_by"},
		{"usage limit 0", "GET", usage(rng + "&limit=0"), "", "limit"},
		{"usage limit 1001", "GET", usage(rng + "&limit=1001"), "", "limit"},
		{"usage limit text", "GET", usage(rng + "&limit=ten"), "", "limit"},
		{"usage bad cursor", "GET", usage(rng + "&cursor=%21%21"), "", "cursor"},
		{"usage cursor of another grouping", "GET", usage(rng + "&group_by=day&cursor=" +
			billing.CursorAfter(billing.GroupByUser, billing.UsageRow{Issuer: "acme", Key: "alice"})), "", "cursor"},
		{"usage unknown param", "GET", usage(rng + "&group-by=day"), "", "group-by"},
		{"usage repeated param", "GET", usage(rng + "&iss=a&iss=b"), "", "iss"},
		{"usage sub without iss", "GET", usage(rng + "&sub=alice"), "", "sub"},
		{"usage bad iss", "GET", usage(rng + "&iss="), "", "iss"},
		{"usage bad sub", "GET", usage(rng + "&iss=acme&sub=%0A"), "", "sub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.expectError(t, tc.method, tc.path, tc.body, http.StatusBadRequest, wire.InvalidArgument, tc.field)
		})
	}
	t.Run("csv with limit", func(t *testing.T) {
		r := e.send(t, request{method: "GET", path: usage(rng + "&limit=5"), key: e.adminKey, header: map[string]string{"Accept": "text/csv"}})
		if we := r.err(t); r.status != http.StatusBadRequest || we.Details["field"] != "limit" {
			t.Fatalf("%d %+v", r.status, we)
		}
	})
	// Nothing invalid was stored.
	if _, err := e.ledger.GetQuota(context.Background(), billing.QuotaKey{Issuer: "acme"}); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("an invalid quota was stored: %v", err)
	}
}

func TestAPIBodyLimit(t *testing.T) {
	e := newAPIEnv(t)
	big := `{"name":"` + strings.Repeat("x", billing.DefaultMaxBodyBytes) + `"}`
	// Announced by Content-Length, and streamed without one (chunked).
	for _, body := range []io.Reader{strings.NewReader(big), io.MultiReader(strings.NewReader(big))} {
		req, err := http.NewRequest("PUT", e.url+"/v1/issuers/acme", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := response{status: resp.StatusCode, body: data}
		if we := r.err(t); r.status != http.StatusRequestEntityTooLarge || we.Code != wire.PayloadTooLarge {
			t.Fatalf("content length %d: %d %s, want 413 payload_too_large", req.ContentLength, r.status, we.Code)
		}
	}
	// Just under the limit is fine (and then a bad name, not a size problem).
	e.expectError(t, "PUT", "/v1/issuers/acme", `{"name":"`+strings.Repeat("x", 1000)+`"}`, http.StatusBadRequest, wire.InvalidArgument, "name")
}

type usageJSON struct {
	GroupBy    string `json:"group_by"`
	Rows       []map[string]any
	Totals     billing.UsageTotals
	NextCursor string `json:"next_cursor"`
}

var day0 = time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)

func recordEvents(t *testing.T, l billing.Ledger) {
	t.Helper()
	acct := func(iss, sub string) billing.Account {
		return billing.Account{Issuer: iss, User: sub, Window: billing.Lifetime}
	}
	for _, ev := range []billing.UsageEvent{
		{Key: "1", Account: acct("acme", "alice"), Kind: billing.KindAI, Model: "opus", AIMicros: 100, At: day0},
		{Key: "2", Account: acct("acme", "alice"), Kind: billing.KindCompute, ComputeSeconds: 60, At: day0.Add(25 * time.Hour)},
		{Key: "3", Account: acct("acme", "bob"), Kind: billing.KindAI, Model: "sonnet", AIMicros: 10, At: day0.Add(time.Hour)},
		{Key: "4", Account: acct("beta", "carol"), Kind: billing.KindAI, Model: "opus", AIMicros: 1, At: day0.Add(2 * time.Hour)},
		{Key: "late", Account: acct("acme", "alice"), Kind: billing.KindAI, Model: "opus", AIMicros: 1000, At: day0.AddDate(0, 1, 0)},
	} {
		if err := l.Record(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAPIUsage(t *testing.T) {
	e := newAPIEnv(t)
	recordEvents(t, e.ledger)
	const rng = "/v1/usage?from=2030-03-04&to=2030-03-06T00:00:00Z"
	var page usageJSON
	e.call(t, "GET", rng, "", &page)
	wantTotals := billing.UsageTotals{AIMicros: 111, ComputeSeconds: 60, Events: 4}
	if page.GroupBy != "user" || len(page.Rows) != 3 || page.Totals != wantTotals || page.NextCursor != "" {
		t.Fatalf("default page: %+v", page)
	}
	if r := page.Rows[0]; r["iss"] != "acme" || r["sub"] != "alice" || r["ai_microdollars"] != 100.0 || r["compute_seconds"] != 60.0 ||
		r["events"] != 2.0 || r["day"] != nil || r["model"] != nil {
		t.Fatalf("first row %v", r)
	}
	for _, tc := range []struct {
		query string
		keys  []string // group keys of the rows, in order
	}{
		{"&group_by=day", []string{"acme 2030-03-04", "acme 2030-03-05", "beta 2030-03-04"}},
		{"&group_by=model", []string{"acme ", "acme opus", "acme sonnet", "beta opus"}},
		{"&group_by=model&iss=acme&sub=alice", []string{"acme ", "acme opus"}},
		{"&iss=beta", []string{"beta carol"}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var page usageJSON
			e.call(t, "GET", rng+tc.query, "", &page)
			col := map[string]string{"": "sub", "user": "sub", "day": "day", "model": "model"}[page.GroupBy]
			var keys []string
			for _, r := range page.Rows {
				keys = append(keys, fmt.Sprintf("%s %s", r["iss"], r[col]))
			}
			if !slices.Equal(keys, tc.keys) {
				t.Fatalf("rows %v, want %v", keys, tc.keys)
			}
		})
	}
	// Pages of one row walk the same rows, with the whole range's totals on each.
	var walked []map[string]any
	cursor := ""
	for i := 0; ; i++ {
		if i > 3 {
			t.Fatal("more than 3 pages of one row")
		}
		var p usageJSON
		e.call(t, "GET", rng+"&limit=1&cursor="+url.QueryEscape(cursor), "", &p)
		if p.Totals != wantTotals || len(p.Rows) != 1 {
			t.Fatalf("page %d: %+v", i, p)
		}
		walked = append(walked, p.Rows...)
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if fmt.Sprint(walked) != fmt.Sprint(page.Rows) {
		t.Fatalf("walked %v, want %v", walked, page.Rows)
	}
}

// The CSV export streams every row across several internal pages and parses back to what JSON pages say.
func TestAPIUsageCSV(t *testing.T) {
	e := newAPIEnv(t)
	// More users than one internal page holds, inserted in one transaction to keep the test fast.
	const users = billing.MaxUsageLimit*2 + 17
	db, err := sqlitedb.Open(context.Background(), e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range users {
		if _, err := tx.Exec(`INSERT INTO usage_events (key, issuer, "user", "window", window_start, kind, model, ai_micros, compute_seconds, at)
			VALUES (?, 'acme', ?, 'lifetime', 0, 'ai', 'opus', ?, ?, ?)`,
			fmt.Sprint(i), fmt.Sprintf("user,\"%05d\"", i), i, i%7, day0.Add(time.Duration(i)*time.Second).UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	const rng = "/v1/usage?from=2030-03-04&to=2030-03-05"
	r := e.send(t, request{method: "GET", path: rng, key: e.adminKey, header: map[string]string{"Accept": "application/json;q=0.5, text/csv"}})
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") ||
		!strings.Contains(r.header.Get("Content-Disposition"), "usage-by-user.csv") {
		t.Fatalf("CSV export: %d %q %q", r.status, r.header.Get("Content-Type"), r.header.Get("Content-Disposition"))
	}
	records, err := csv.NewReader(bytes.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(records[0], []string{"iss", "sub", "ai_microdollars", "compute_seconds", "events"}) {
		t.Fatalf("header %v", records[0])
	}
	records = records[1:]
	if len(records) != users {
		t.Fatalf("%d CSV rows, want %d", len(records), users)
	}
	// Rebuild the same rows from the JSON pages.
	var fromJSON [][]string
	cursor := ""
	for {
		var p usageJSON
		e.call(t, "GET", rng+"&limit=1000&cursor="+url.QueryEscape(cursor), "", &p)
		for _, row := range p.Rows {
			fromJSON = append(fromJSON, []string{row["iss"].(string), row["sub"].(string),
				fmt.Sprint(row["ai_microdollars"]), fmt.Sprint(row["compute_seconds"]), fmt.Sprint(row["events"])})
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if !slices.EqualFunc(records, fromJSON, slices.Equal) {
		t.Fatal("CSV rows differ from the JSON pages")
	}
	if !sort.SliceIsSorted(records, func(i, j int) bool { return records[i][1] < records[j][1] }) || records[0][1] != `user,"00000"` {
		t.Fatalf("CSV rows not in key order, or quoting lost: first %v", records[0])
	}
	// A cursor starts the export after it.
	cur := billing.CursorAfter(billing.GroupByUser, billing.UsageRow{Issuer: "acme", Key: records[users-3][1]})
	r = e.send(t, request{method: "GET", path: rng + "&cursor=" + cur, key: e.adminKey, header: map[string]string{"Accept": "text/csv"}})
	tail, err := csv.NewReader(bytes.NewReader(r.body)).ReadAll()
	if err != nil || len(tail) != 3 || !slices.Equal(tail[1], records[users-2]) {
		t.Fatalf("export after a cursor: %v, %v", tail, err)
	}
}

type priceJSON struct {
	Model   string
	Price   billing.Price
	Matched string
	Custom  bool
}

func TestAPIPrices(t *testing.T) {
	e := newAPIEnv(t)
	defaults := billing.DefaultPrices()
	var table struct {
		Default billing.Price
		Models  []struct {
			Model  string
			Price  billing.Price
			Custom bool
		}
	}
	e.call(t, "GET", "/v1/prices", "", &table)
	if table.Default != defaults.Default || len(table.Models) != len(defaults.Models) {
		t.Fatalf("built-in table: %+v", table)
	}
	var p priceJSON
	e.call(t, "GET", "/v1/prices/claude-sonnet-4-5-20250929", "", &p)
	if p.Matched != "claude-sonnet" || p.Custom || p.Price != defaults.Models["claude-sonnet"] {
		t.Fatalf("built-in price: %+v", p)
	}
	e.call(t, "GET", "/v1/prices/gpt-5", "", &p)
	if p.Matched != "" || p.Custom || p.Price != defaults.Default {
		t.Fatalf("unknown model: %+v", p)
	}

	e.call(t, "PUT", "/v1/prices/claude-sonnet", `{"input":1,"output":2,"cache_read":3,"cache_creation":4}`, &p)
	want := billing.Price{Input: 1, Output: 2, CacheRead: 3, CacheCreation: 4}
	if p.Model != "claude-sonnet" || !p.Custom || p.Price != want {
		t.Fatalf("PUT = %+v", p)
	}
	e.call(t, "PUT", "/v1/prices/my-model", `{"input":5,"output":5,"cache_read":0,"cache_creation":0}`, nil)
	e.call(t, "GET", "/v1/prices/claude-sonnet-4-5-20250929", "", &p)
	if p.Matched != "claude-sonnet" || !p.Custom || p.Price != want {
		t.Fatalf("overridden price: %+v", p)
	}
	e.call(t, "GET", "/v1/prices", "", &table)
	custom := map[string]bool{}
	for _, m := range table.Models {
		if m.Custom {
			custom[m.Model] = true
		}
	}
	if len(table.Models) != len(defaults.Models)+1 || len(custom) != 2 || !custom["claude-sonnet"] || !custom["my-model"] {
		t.Fatalf("table after two PUTs: %+v", table.Models)
	}
	if !slices.IsSortedFunc(table.Models, func(a, b struct {
		Model  string
		Price  billing.Price
		Custom bool
	}) int {
		return strings.Compare(a.Model, b.Model)
	}) {
		t.Fatal("models not sorted")
	}
}

// The OpenAPI document and the mux describe the same API: every documented operation is a route, every
// route is documented, each one answers (never the mux's "no such route"), and every $ref resolves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	e := newAPIEnv(t)
	r := e.call(t, "GET", "/v1/openapi.json", "", nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	var documented []string
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	routes := billing.Routes()
	slices.Sort(documented)
	slices.Sort(routes)
	if !slices.Equal(documented, routes) {
		t.Fatalf("OpenAPI operations and routes differ:\ndocumented %v\nroutes     %v", documented, routes)
	}
	for _, rt := range routes {
		method, pattern, _ := strings.Cut(rt, " ")
		r := e.send(t, request{method: method, path: routePath(pattern), body: "{}", key: e.adminKey})
		if r.status == http.StatusNotFound && strings.Contains(string(r.body), "has no route") {
			t.Errorf("%s is documented but not served", rt)
		}
	}
	// Every $ref points at a component that exists.
	testenv.OpenAPIRefs(t, r.body)
}

// Mount puts the API beside other handlers: its routes reach it, everything else the fallback.
func TestMount(t *testing.T) {
	e := newAPIEnv(t)
	api, err := billing.NewAPI(billing.APIConfig{Store: e.ledger, Keys: e.secrets, AdminKeys: e.secrets.AdminKeys})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.HandleFunc("GET /v1/regions", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	api.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	e.url = srv.URL
	for _, rt := range billing.Routes() {
		method, pattern, _ := strings.Cut(rt, " ")
		if r := e.send(t, request{method: method, path: routePath(pattern)}); r.status != http.StatusUnauthorized {
			t.Errorf("%s through the mux: %d, want the API's 401", rt, r.status)
		}
	}
	for _, path := range []string{"/v1/sandbox/exec", "/v1/regions", "/ws"} {
		if r := e.send(t, request{method: "GET", path: path}); r.status != http.StatusTeapot {
			t.Errorf("%s: %d, want the fallback", path, r.status)
		}
	}
}

func TestAPIMetrics(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "GET", "/v1/issuers", "", nil)
	e.send(t, request{method: "GET", path: "/v1/issuers"})
	families, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	for _, k := range []string{
		"warren_billing_api_requests_total{200,GET /v1/issuers}",
		"warren_billing_api_requests_total{401,GET /v1/issuers}",
		"warren_billing_api_auth_failures_total{missing}",
	} {
		if got[k] != 1 {
			t.Errorf("%s = %v, want 1 (have %v)", k, got[k], got)
		}
	}
}
