package modelproxy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/runner/modelproxy"
)

// callAs sends payload to path with token and extra headers (added to the agent's usual ones) and query.
func callAs(t testing.TB, e *env, path, token, payload string, hdr http.Header, query string) (*http.Response, []byte) {
	t.Helper()
	u := e.url + path
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", token)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(modelserver.HeaderScenario, "plain")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// wantAPIError checks one of the proxy's own answers: status and error type.
func wantAPIError(t testing.TB, resp *http.Response, b []byte, status int, typ string) {
	t.Helper()
	wantStatus(t, resp, b, status)
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Type != typ {
		t.Fatalf("body %s, want a %s", b, typ)
	}
}

// noUpstream checks that nothing reached the model server.
func noUpstream(t testing.TB, e *env) {
	t.Helper()
	if n := len(e.ms.Requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

// refusedOnBothRoutes checks that every payload is refused (400) on /v1/messages and count_tokens, and
// that none reached the upstream.
func refusedOnBothRoutes(t *testing.T, e *env, token string, payloads map[string]string) {
	t.Helper()
	for name, payload := range payloads {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
				resp, b := callAs(t, e, path, token, payload, nil, "")
				wantAPIError(t, resp, b, http.StatusBadRequest, "invalid_request_error")
			}
		})
	}
	noUpstream(t, e)
}

// withTools is a request body offering tools (raw JSON array) plus extra top-level fields.
func withTools(model, tools, extra string) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":100,"stream":true%s,"tools":%s,"messages":[{"role":"user","content":"hi"}]}`, model, extra, tools)
}

// A token restricted to one model (permissions.model) cannot name another, on either route.
func TestForbiddenModelIsRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.Open("s1", modelproxy.SessionGrant{Account: acct, AILimit: -1, Models: []string{"claude-haiku-4-5"}})
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		for _, model := range []string{"claude-opus-4-1", "claude-haiku-4-5-20251001", "", "CLAUDE-HAIKU-4-5"} {
			resp, b := callAs(t, e, path, token, body(model, 100, false), nil, "")
			wantAPIError(t, resp, b, http.StatusForbidden, "permission_error")
		}
	}
	noUpstream(t, e)
	if got := e.counter(t, "warren_modelproxy_rejected_total", "reason", "policy"); got != 8 {
		t.Errorf("%v policy rejections, want 8", got)
	}
	resp, b := callAs(t, e, "/v1/messages", token, body("claude-haiku-4-5", 100, false), nil, "")
	wantStatus(t, resp, b, http.StatusOK)
	waitFor(t, func() bool {
		u := ledgerUsage(t, e.ledger)
		return u.AIMicros != 0 && u.AIMicros == e.proxy.Usage("s1").AIMicros
	},
		func() string {
			return fmt.Sprintf("ledger %+v, session %+v", ledgerUsage(t, e.ledger), e.proxy.Usage("s1"))
		})

	// A reopened session takes the new grant's models.
	e.proxy.Open("s1", modelproxy.SessionGrant{Account: acct, AILimit: -1})
	resp, b = callAs(t, e, "/v1/messages", token, body("claude-opus-4-1", 100, false), nil, "")
	wantStatus(t, resp, b, http.StatusOK)
}

// Server tools, MCP servers, fast mode, inference geography and containers are refused unless allowed;
// plain client tools pass.
func TestServerToolsAndGatedFieldsAreRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		c.AllowServerTools = []string{"tool_search_tool_regex_"}
	})
	token := e.proxy.OpenSession("s1", acct, -1)
	const client = `{"name":"Bash","description":"run","input_schema":{"type":"object"}}`
	refused := map[string]string{
		"web_search":      withTools("claude-sonnet-4-5", `[`+client+`,{"type":"web_search_20250305","name":"web_search","max_uses":99}]`, ""),
		"code_execution":  withTools("claude-sonnet-4-5", `[{"type":"code_execution_20250825","name":"code_execution"}]`, ""),
		"web_fetch":       withTools("claude-sonnet-4-5", `[{"type":"web_fetch_20250910","name":"web_fetch"}]`, ""),
		"bash":            withTools("claude-sonnet-4-5", `[{"type":"bash_20250124","name":"bash"}]`, ""),
		"duplicate type":  withTools("claude-sonnet-4-5", `[{"type":"custom","name":"x","type":"web_search_20250305"}]`, ""),
		"type not string": withTools("claude-sonnet-4-5", `[{"type":1,"name":"x"}]`, ""),
		"tool not object": withTools("claude-sonnet-4-5", `["web_search"]`, ""),
		"mcp_servers":     withTools("claude-sonnet-4-5", `[]`, `,"mcp_servers":[{"type":"url","url":"https://example.com/sse","name":"x"}]`),
		"empty mcp":       withTools("claude-sonnet-4-5", `[]`, `,"mcp_servers":[]`),
		"speed":           withTools("claude-sonnet-4-5", `[]`, `,"speed":"fast"`),
		"inference_geo":   withTools("claude-sonnet-4-5", `[]`, `,"inference_geo":"us"`),
		"container":       withTools("claude-sonnet-4-5", `[]`, `,"container":{"skills":[{"type":"anthropic","skill_id":"xlsx"}]}`),
		"duplicate tools": withTools("claude-sonnet-4-5", `[]`, `,"tools":[{"type":"web_search_20250305","name":"w"}]`),
		"duplicate speed": withTools("claude-sonnet-4-5", `[]`, `,"speed":"standard","speed":"fast"`),
	}
	refusedOnBothRoutes(t, e, token, refused)
	for name, payload := range map[string]string{
		"client tool":       withTools("claude-sonnet-4-5", `[`+client+`]`, ""),
		"custom type":       withTools("claude-sonnet-4-5", `[{"type":"custom","name":"x","input_schema":{}}]`, ""),
		"allowed type":      withTools("claude-sonnet-4-5", `[{"type":"tool_search_tool_regex_20251119","name":"s"}]`, ""),
		"nested type field": withTools("claude-sonnet-4-5", `[{"name":"x","input_schema":{"type":"web_search_20250305"}}]`, ""),
		"no tools":          withTools("claude-sonnet-4-5", `null`, ""),
	} {
		resp, b := callAs(t, e, "/v1/messages", token, payload, nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", name, resp.StatusCode, b)
		}
	}
}

// anthropic-beta values other than the CLI's and the configured ones are refused, and so are query
// parameters other than the SDK's beta=true. AllowsBeta (what a session's betas option is checked
// against) says the same.
func TestUnknownBetaIsRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) { c.AllowBetas = []string{"extra-2026-01-01"} })
	for b, want := range map[string]bool{modelproxy.CLIBetas[0]: true, "extra-2026-01-01": true, "files-api-2025-04-14": false, "Claude-Code-20250219": false} {
		if got := e.proxy.AllowsBeta(b); got != want {
			t.Errorf("AllowsBeta(%q) = %v, want %v", b, got, want)
		}
	}
	token := e.proxy.OpenSession("s1", acct, -1)
	for _, tc := range []struct {
		name  string
		betas []string
		query string
	}{
		{"files api", []string{"files-api-2025-04-14"}, ""},
		{"mcp client", []string{"mcp-client-2025-04-04"}, ""},
		{"one bad among good", []string{"claude-code-20250219, code-execution-2025-08-25"}, ""},
		{"second header", []string{"claude-code-20250219", "context-1m-2025-08-07"}, ""},
		{"case differs", []string{"Claude-Code-20250219"}, ""},
		{"other query", nil, "beta=true&x=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
				resp, b := callAs(t, e, path, token, body("claude-sonnet-4-5", 100, false), http.Header{"Anthropic-Beta": tc.betas}, tc.query)
				wantAPIError(t, resp, b, http.StatusBadRequest, "invalid_request_error")
			}
		})
	}
	noUpstream(t, e)
	all := strings.Join(append(modelproxy.CLIBetas, "extra-2026-01-01"), ", ") + ","
	resp, b := callAs(t, e, "/v1/messages", token, body("claude-sonnet-4-5", 100, false), http.Header{"Anthropic-Beta": {all}}, "beta=true")
	wantStatus(t, resp, b, http.StatusOK)
	if got := e.ms.Requests()[0].Header.Get("Anthropic-Beta"); got != all {
		t.Errorf("upstream anthropic-beta %q, want %q", got, all)
	}
}

// A model the price table does not know is charged at its dearest price of every kind.
func TestUnknownModelIsPricedDearest(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	resp, b := callAs(t, e, "/v1/messages", token, body("mystery-model-9", 100, false), nil, "")
	wantStatus(t, resp, b, http.StatusOK)
	u := usageOf(t, b)
	dear := billing.Price{}
	for _, p := range e.prices.Models {
		dear = billing.Price{Input: max(dear.Input, p.Input), Output: max(dear.Output, p.Output),
			CacheRead: max(dear.CacheRead, p.CacheRead), CacheCreation: max(dear.CacheCreation, p.CacheCreation)}
	}
	want := dear.Cost(u)
	if want <= e.prices.Default.Cost(u) {
		t.Fatalf("the dearest price %+v is not above the default %+v", dear, e.prices.Default)
	}
	waitFor(t, func() bool { return ledgerUsage(t, e.ledger).AIMicros == want }, func() string {
		return fmt.Sprintf("charged %d µ$ for %+v, want %d (dearest price)", ledgerUsage(t, e.ledger).AIMicros, u, want)
	})
}

// A count_tokens flood is cut to the session's bucket (429 rate_limit_error with retry-after, nothing
// forwarded beyond it) and large count_tokens bodies are refused; model calls have their own bucket.
func TestCountTokensFloodIsLimited(t *testing.T) {
	clock := ledgertest.NewClock(time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC))
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		c.Now = clock.Now
		c.CountTokensPerMinute = 40 // a burst of 10, then one every 1.5 s
		c.MessagesPerMinute = 8     // a burst of 2
	})
	token := e.proxy.OpenSession("s1", acct, -1)
	payload := body("claude-sonnet-4-5", -1, false)
	ok, limited := 0, 0
	for range 50 {
		resp, b := callAs(t, e, "/v1/messages/count_tokens", token, payload, nil, "")
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			wantAPIError(t, resp, b, http.StatusTooManyRequests, "rate_limit_error")
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 2 {
				t.Fatalf("retry-after %q, want 1 or 2 seconds", resp.Header.Get("Retry-After"))
			}
		default:
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	if ok != 10 || limited != 40 || len(e.ms.Requests()) != 10 {
		t.Errorf("%d forwarded, %d limited, %d upstream; want 10, 40, 10", ok, limited, len(e.ms.Requests()))
	}
	// The model bucket is separate and the count bucket refills with time.
	for i := range 3 {
		resp, b := callAs(t, e, "/v1/messages", token, body("claude-sonnet-4-5", 10, false), nil, "")
		if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
			t.Fatalf("model call %d: status %d, want %d: %s", i, resp.StatusCode, want, b)
		}
	}
	clock.Advance(1500 * time.Millisecond)
	resp, b := callAs(t, e, "/v1/messages/count_tokens", token, payload, nil, "")
	wantStatus(t, resp, b, http.StatusOK)
	resp, b = callAs(t, e, "/v1/messages/count_tokens", token, payload, nil, "")
	wantStatus(t, resp, b, http.StatusTooManyRequests)

	// Sessions do not share buckets.
	other := e.proxy.OpenSession("s2", acct, -1)
	resp, b = callAs(t, e, "/v1/messages/count_tokens", other, payload, nil, "")
	wantStatus(t, resp, b, http.StatusOK)

	// A count_tokens body is bounded well below a model call's.
	clock.Advance(time.Minute)
	big := fmt.Sprintf(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":%q}]}`, strings.Repeat("x", modelproxy.MaxCountTokensBytes))
	before := len(e.ms.Requests())
	resp, b = callAs(t, e, "/v1/messages/count_tokens", token, big, nil, "")
	wantAPIError(t, resp, b, http.StatusRequestEntityTooLarge, "request_too_large")
	if len(e.ms.Requests()) != before {
		t.Errorf("an oversized count_tokens body reached the upstream")
	}
	if got := e.counter(t, "warren_modelproxy_rejected_total", "reason", "rate"); got != 42 {
		t.Errorf("%v rate rejections, want 42", got)
	}
}

// With RequireTurn, a session's token works only while one of its turns runs: a process the agent left
// behind cannot spend between turns.
func TestCallWithoutRunningTurnIsRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) { c.RequireTurn = true })
	token := e.proxy.OpenSession("s1", acct, -1)
	payload := body("claude-sonnet-4-5", 10, false)
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		resp, b := callAs(t, e, path, token, payload, nil, "")
		wantAPIError(t, resp, b, http.StatusForbidden, "permission_error")
	}
	noUpstream(t, e)
	e.proxy.TurnStart("s1")
	resp, b := callAs(t, e, "/v1/messages", token, payload, nil, "")
	wantStatus(t, resp, b, http.StatusOK)
	// Another session's turn does not open this one.
	other := e.proxy.OpenSession("s2", acct, -1)
	resp, b = callAs(t, e, "/v1/messages", other, payload, nil, "")
	wantStatus(t, resp, b, http.StatusForbidden)
	e.proxy.TurnEnd("s1")
	resp, b = callAs(t, e, "/v1/messages", token, payload, nil, "")
	wantAPIError(t, resp, b, http.StatusForbidden, "permission_error")
	waitFor(t, func() bool { u := e.proxy.Usage("s1"); return u.Calls == 1 && !u.BudgetExhausted },
		func() string { return fmt.Sprintf("usage %+v, want one call and no budget flag", e.proxy.Usage("s1")) })
	if got := e.counter(t, "warren_modelproxy_rejected_total", "reason", "no_turn"); got != 4 {
		t.Errorf("%v no_turn rejections, want 4", got)
	}
}

// A rotated or revoked token gets 401 at once; the session keeps its usage and a fresh token works.
func TestRevokedTokenIsRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	old := e.proxy.OpenSession("s1", acct, -1)
	payload := body("claude-sonnet-4-5", 10, false)
	resp, b := callAs(t, e, "/v1/messages", old, payload, nil, "")
	wantStatus(t, resp, b, http.StatusOK)

	fresh := e.proxy.RotateToken("s1")
	if fresh == "" || fresh == old {
		t.Fatalf("rotated token %q", fresh)
	}
	resp, b = callAs(t, e, "/v1/messages", old, payload, nil, "")
	wantAPIError(t, resp, b, http.StatusUnauthorized, "authentication_error")
	e.proxy.RevokeToken("s1", old) // no longer the session's: nothing happens
	resp, b = callAs(t, e, "/v1/messages", fresh, payload, nil, "")
	wantStatus(t, resp, b, http.StatusOK)

	e.proxy.RevokeToken("s1", fresh)
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		resp, b = callAs(t, e, path, fresh, payload, nil, "")
		wantAPIError(t, resp, b, http.StatusUnauthorized, "authentication_error")
	}
	waitFor(t, func() bool { return e.proxy.Usage("s1").Calls == 2 },
		func() string {
			return fmt.Sprintf("usage %+v after revocation, want the 2 calls kept", e.proxy.Usage("s1"))
		})
	again := e.proxy.OpenSession("s1", acct, -1)
	if again == "" || again == fresh || again == old {
		t.Fatalf("reopened token %q", again)
	}
	resp, b = callAs(t, e, "/v1/messages", again, payload, nil, "")
	wantStatus(t, resp, b, http.StatusOK)
	if e.proxy.RotateToken("unknown") != "" {
		t.Errorf("rotated the token of a session that is not open")
	}
}

// An admin cutting the user's quota (in the ledger's database) stops a session admitted under the old
// limit at its next call: no new grant has to reach the runner, no client has to be connected.
func TestQuotaCutStopsSpendWithinSeconds(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	ctx := t.Context()
	if _, err := e.ledger.PutIssuer(ctx, acct.Issuer, "Issuer"); err != nil {
		t.Fatal(err)
	}
	token := e.proxy.OpenSession("s1", acct, 5_000_000) // admitted under a $5 quota
	// A loop the agent left running calls the model back to back.
	type outcome struct {
		status int
		at     time.Time
	}
	results := make(chan outcome, 1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, _, err := send(e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, true))
			if err != nil {
				t.Error(err)
				return
			}
			results <- outcome{resp.StatusCode, time.Now()}
			if resp.StatusCode != http.StatusOK {
				return
			}
		}
	})
	for range 5 {
		if o := <-results; o.status != http.StatusOK {
			t.Fatalf("status %d before the cut", o.status)
		}
	}
	used := ledgerUsage(t, e.ledger).AIMicros
	cut := used + 1_000 // $5 → what is spent plus a little
	cutAt := time.Now()
	if _, err := e.ledger.PutQuota(ctx, billing.QuotaKey{Issuer: acct.Issuer, User: acct.User},
		billing.Quota{AIMicros: cut, ComputeSeconds: -1, Window: billing.Day, MaxConcurrentSessions: -1}, 0); err != nil {
		t.Fatal(err)
	}
	var refusedAt time.Time
	timeout := time.After(10 * time.Second)
	for refusedAt.IsZero() {
		select {
		case o := <-results:
			if o.status == http.StatusPaymentRequired {
				refusedAt = o.at
			}
		case <-timeout:
			t.Fatal("spending went on for 10 s after the quota cut")
		}
	}
	close(stop)
	wg.Wait()
	if d := refusedAt.Sub(cutAt); d > 2*time.Second {
		t.Errorf("refused %v after the cut, want within 2 s", d)
	}
	waitFor(t, func() bool { return ledgerUsage(t, e.ledger).HeldAIMicros == 0 }, func() string { return "holds left" })
	if u := ledgerUsage(t, e.ledger); u.AIMicros > cut+e.prices.Lookup("claude-sonnet-4-5").Output*100/1_000_000+100 {
		t.Errorf("%d µ$ spent against a quota cut to %d", u.AIMicros, cut)
	}
	if !e.proxy.Usage("s1").BudgetExhausted {
		t.Errorf("the turn is not marked exhausted")
	}
	t.Logf("spent %d µ$ before the cut; the first call refused came %v after it; %d µ$ in all",
		used, refusedAt.Sub(cutAt).Round(time.Millisecond), ledgerUsage(t, e.ledger).AIMicros)
}

// withField is a plain request body with one more top-level field (raw JSON after the comma).
func withField(field string) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}],` + field + `}`
}

// A top-level field the proxy does not know is refused on both routes with a 400 naming it, and nothing
// reaches the upstream, unless the operator allows it (Config.AllowFields). The gated fields cannot be
// allowed.
func TestUnknownFieldIsRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) { c.AllowFields = []string{"x_allowed"} })
	token := e.proxy.OpenSession("s1", acct, -1)
	for field, name := range map[string]string{
		`"fallback_credit_token":"t"`:      "fallback_credit_token",
		`"thread":{"id":"x"}`:              "thread",
		`"MODEL":"claude-opus-4-1"`:        "MODEL", // another key to the API: not a way around the model check
		`"betas":["files-api-2025-04-14"]`: "betas",
		`"x_allowed_too":1`:                "x_allowed_too",
	} {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			resp, b := callAs(t, e, path, token, withField(field), nil, "")
			wantAPIError(t, resp, b, http.StatusBadRequest, "invalid_request_error")
			if want := fmt.Sprintf("top-level field %q is not enabled", name); !strings.Contains(string(b), strings.ReplaceAll(want, `"`, `\"`)) {
				t.Errorf("%s %s: answer %s does not name the field", path, field, b)
			}
		}
	}
	noUpstream(t, e)
	for _, field := range []string{`"x_allowed":{"a":1}`, `"safeguards":[]`, `"output_config":{"effort":"low"}`, `"context_management":{"edits":[]}`, `"top_k":5`} {
		resp, b := callAs(t, e, "/v1/messages", token, withField(field), nil, "")
		wantStatus(t, resp, b, http.StatusOK)
	}
	for _, gated := range []string{"speed", "mcp_servers"} {
		_, err := modelproxy.New(modelproxy.Config{Upstream: e.msURL, APIKey: realKey, Reserver: e.ledger, AllowFields: []string{gated}})
		if !errors.Is(err, modelproxy.ErrInvalidConfig) {
			t.Errorf("AllowFields %s: %v, want ErrInvalidConfig", gated, err)
		}
	}
	_, err := modelproxy.New(modelproxy.Config{Upstream: e.msURL, APIKey: realKey, Reserver: e.ledger, AllowBetas: []string{"mcp-servers-2025-12-04"}})
	if !errors.Is(err, modelproxy.ErrInvalidConfig) {
		t.Errorf("AllowBetas mcp-servers: %v, want ErrInvalidConfig", err)
	}
}

// service_tier "auto" and "standard_only" are forwarded as sent and charged at the table's prices; any
// other tier (priority capacity, which Warren has no price for) or a non-string is refused.
func TestServiceTier(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	for _, tier := range []string{`"priority"`, `"batch"`, `""`, `"AUTO"`, `1`, `null`} {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			resp, b := callAs(t, e, path, token, withField(`"service_tier":`+tier), nil, "")
			wantAPIError(t, resp, b, http.StatusBadRequest, "invalid_request_error")
		}
	}
	noUpstream(t, e)
	var charged int64
	for i, tier := range []string{"auto", "standard_only"} {
		payload := withField(`"service_tier":"` + tier + `"`)
		resp, b := callAs(t, e, "/v1/messages", token, payload, nil, "")
		wantStatus(t, resp, b, http.StatusOK)
		if got := string(e.ms.Requests()[i].Body); got != payload {
			t.Errorf("forwarded %s, want %s", got, payload)
		}
		charged += e.prices.Lookup("claude-sonnet-4-5").Cost(usageOf(t, b))
	}
	waitFor(t, func() bool { return ledgerUsage(t, e.ledger).AIMicros == charged }, func() string {
		return fmt.Sprintf("charged %d µ$, want %d (standard prices)", ledgerUsage(t, e.ledger).AIMicros, charged)
	})
}

// An image or a document given by URL is fetched by the API: its tokens (about 1,600 per image, thousands
// per PDF page) are not bounded by the request's bytes, on which the proxy's reservation rests, so a tenant
// near the end of its budget could have a call of a few hundred bytes and max_tokens 1 admitted and cost
// far more than was held (and many at once). Such a source is refused at any depth (a tool result's
// content too), on both routes, and so is a repeated name anywhere (a "type" given twice must not read as
// base64 here and url upstream). Before the fix every one of these reached the upstream.
func TestURLSourcesAreRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	body := func(content string) string {
		return `{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{"role":"user","content":` + content + `}]}`
	}
	const img = `{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`
	refusedOnBothRoutes(t, e, token, map[string]string{
		"image":          body(`[` + img + `]`),
		"document":       body(`[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]`),
		"in tool result": body(`[{"type":"tool_result","tool_use_id":"t","content":[` + img + `]}]`),
		"in system":      `{"model":"claude-sonnet-4-5","max_tokens":1,"system":[` + img + `],"messages":[{"role":"user","content":"hi"}]}`,
		"duplicate type": body(`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA==","type":"url","url":"https://example.com/a.png"}}]`),
		"duplicate deep": body(`[{"type":"text","text":"a","text":"b"}]`),
		"invalid UTF-8":  body("\"\xff\""),
	})
	for name, payload := range map[string]string{
		"base64 image":     body(`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]`),
		"url as text":      body(`[{"type":"text","text":"{\"source\":{\"type\":\"url\"}}"}]`),
		"search result":    body(`[{"type":"search_result","source":"https://example.com","title":"t","content":[{"type":"text","text":"x"}]}]`),
		"schema named url": withTools("claude-sonnet-4-5", `[{"name":"x","input_schema":{"type":"object","properties":{"source":{"type":"string"}}}}]`, ""),
	} {
		resp, b := callAs(t, e, "/v1/messages", token, payload, nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", name, resp.StatusCode, b)
		}
	}
}
