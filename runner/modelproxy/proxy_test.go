package modelproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/runner/modelproxy"
)

// realKey is the upstream API key; it must reach the model server and nothing else.
const realKey = "sk-ant-api03-real-key-never-in-the-sandbox"

var acct = billing.Account{Issuer: "iss", User: "alice", Window: billing.Day, WindowStart: time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)}

// env is a proxy between a client and the scripted model server, metering into a real SQLite ledger.
type env struct {
	ms     *modelserver.Server
	msURL  string
	ledger *sqlite.Ledger
	lpath  string // the ledger's file
	proxy  *modelproxy.Proxy
	url    string
	prices billing.Prices
	rec    *recorder
	reg    *prometheus.Registry
}

// recorder is the proxy's upstream transport: it keeps the exact bytes of every answer the model server
// sent, as the proxy read them.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	got  []*bytes.Buffer
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	buf := &bytes.Buffer{}
	r.mu.Lock()
	r.got = append(r.got, buf)
	r.mu.Unlock()
	resp.Body = teeBody{io.TeeReader(resp.Body, lockedWriter{&r.mu, buf}), resp.Body}
	return resp, nil
}

func (r *recorder) last() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.got[len(r.got)-1].Bytes())
}

type teeBody struct {
	io.Reader
	io.Closer
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func startEnv(t testing.TB, opts modelserver.Options, mod ...func(*modelproxy.Config)) *env {
	t.Helper()
	ms := modelserver.New(opts)
	msURL, err := ms.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	lpath := filepath.Join(t.TempDir(), "ledger.db")
	ledger, err := sqlite.New(context.Background(), sqlite.Config{Path: lpath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })
	rec := &recorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	reg := prometheus.NewRegistry()
	cfg := modelproxy.Config{
		Upstream: msURL,
		APIKey:   realKey,
		Reserver: ledger,
		Prices:   billing.DefaultPrices(),
		Client:   &http.Client{Transport: rec},
		Metrics:  reg,
		// The tests below hammer one session; TestRateLimits sets rates.
		MessagesPerMinute:    -1,
		CountTokensPerMinute: -1,
	}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := modelproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url, err := p.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return &env{ms: ms, msURL: msURL, ledger: ledger, lpath: lpath, proxy: p, url: url, prices: cfg.Prices, rec: rec, reg: reg}
}

// modelCalls are the upstream's /v1/messages requests: what the model answered, without the proxy's own
// count_tokens calls.
func (e *env) modelCalls() []modelserver.Request {
	var out []modelserver.Request
	for _, r := range e.ms.Requests() {
		if r.Path == "/v1/messages" {
			out = append(out, r)
		}
	}
	return out
}

// body is a Messages API request; maxTokens < 0 leaves max_tokens out.
func body(model string, maxTokens int, stream bool) string {
	mt := ""
	if maxTokens >= 0 {
		mt = fmt.Sprintf(`"max_tokens":%d,`, maxTokens)
	}
	return fmt.Sprintf(`{"model":%q,%s"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, model, mt, stream)
}

// post sends a request as the agent would, with token as its API key.
func post(t testing.TB, base, path, token, scenario, payload string) (*http.Response, []byte) {
	t.Helper()
	resp, b, err := send(base, path, token, scenario, payload)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// send is post for goroutines other than the test's.
func send(base, path, token, scenario, payload string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(payload))
	if err != nil {
		return nil, nil, err
	}
	if token != "" {
		req.Header.Set("X-Api-Key", token)
	}
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Anthropic-Beta", "interleaved-thinking-2025-05-14")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(modelserver.HeaderScenario, scenario)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp, b, nil
}

// usageOf reads the usage an answer reported, streamed or not, as the agent sees it.
func usageOf(t testing.TB, answer []byte) billing.TokenUsage {
	t.Helper()
	var u billing.TokenUsage
	merge := func(v billing.TokenUsage) {
		u.InputTokens = max(u.InputTokens, v.InputTokens)
		u.OutputTokens = max(u.OutputTokens, v.OutputTokens)
		u.CacheReadInputTokens = max(u.CacheReadInputTokens, v.CacheReadInputTokens)
		u.CacheCreationInputTokens = max(u.CacheCreationInputTokens, v.CacheCreationInputTokens)
	}
	if !bytes.HasPrefix(answer, []byte("event:")) {
		var m struct{ Usage billing.TokenUsage }
		if err := json.Unmarshal(answer, &m); err != nil {
			t.Fatalf("answer %q: %v", answer, err)
		}
		return m.Usage
	}
	for _, ev := range strings.Split(string(answer), "\n\n") {
		_, data, ok := strings.Cut(ev, "\ndata: ")
		if !ok {
			continue
		}
		var v struct {
			Type    string
			Message struct{ Usage *billing.TokenUsage }
			Usage   *billing.TokenUsage
		}
		if json.Unmarshal([]byte(data), &v) != nil {
			continue
		}
		switch {
		case v.Type == "message_start" && v.Message.Usage != nil:
			merge(*v.Message.Usage)
		case v.Type == "message_delta" && v.Usage != nil:
			merge(*v.Usage)
		}
	}
	return u
}

func ledgerUsage(t testing.TB, l *sqlite.Ledger) billing.Usage {
	t.Helper()
	u, err := l.Usage(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func wantStatus(t testing.TB, resp *http.Response, b []byte, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
}

// wantRefusal checks the proxy's own budget refusal: 402 billing_error, which the CLI does not retry.
func wantRefusal(t testing.TB, resp *http.Response, b []byte, message string) {
	t.Helper()
	wantStatus(t, resp, b, http.StatusPaymentRequired)
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Type != "billing_error" || !strings.Contains(e.Error.Message, message) {
		t.Fatalf("refusal body %s, want a billing_error saying %q", b, message)
	}
	if resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("refusal without x-should-retry: false")
	}
}

var msgID = regexp.MustCompile(`msg_warren_\d+`)

func TestStreamPassesThroughByteForByte(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := startEnv(t, modelserver.Options{})
			token := e.proxy.OpenSession("s1", acct, -1)
			payload := body("claude-sonnet-4-5", 1024, stream)

			direct, directBody := post(t, e.msURL, "/v1/messages", "direct-key", "plain", payload)
			wantStatus(t, direct, directBody, http.StatusOK)
			resp, got := post(t, e.url, "/v1/messages", token, "plain", payload)
			wantStatus(t, resp, got, http.StatusOK)

			if sent := e.rec.last(); !bytes.Equal(got, sent) {
				t.Fatalf("the agent got\n%q\nthe model server sent\n%q", got, sent)
			}
			// Against a direct request: the same answer but for the server's message counter.
			if a, b := msgID.ReplaceAll(got, nil), msgID.ReplaceAll(directBody, nil); !bytes.Equal(a, b) {
				t.Fatalf("through the proxy\n%q\ndirect\n%q", a, b)
			}
			if ct, want := resp.Header.Get("Content-Type"), direct.Header.Get("Content-Type"); ct != want {
				t.Errorf("content type %q, direct %q", ct, want)
			}
			if stream && !bytes.Contains(got, []byte("event: message_stop")) {
				t.Errorf("no message_stop in %q", got)
			}
		})
	}
}

// The proxy must not hold a stream back: the first event reaches the agent while the model server is
// still sending.
func TestStreamIsNotBuffered(t *testing.T) {
	e := startEnv(t, modelserver.Options{Delay: 10 * time.Millisecond})
	token := e.proxy.OpenSession("s1", acct, -1)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(body("claude-sonnet-4-5", 4096, true)))
	req.Header.Set("X-Api-Key", token)
	req.Header.Set(modelserver.HeaderScenario, "long")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seen []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(seen, []byte("event: content_block_delta")) {
		n, err := resp.Body.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			t.Fatalf("%v after %q", err, seen)
		}
	}
	first := time.Since(start)
	// "long" streams 200 deltas 10 ms apart: the model server needs at least 2 s to send it all.
	if first > time.Second {
		t.Errorf("first delta after %v: the stream was buffered", first)
	}
	t.Logf("first delta after %v", first)
}

func TestSettledCostIsObservedUsage(t *testing.T) {
	e := startEnv(t, modelserver.Options{Delay: time.Millisecond})
	token := e.proxy.OpenSession("s1", acct, -1)
	calls := []struct {
		model    string
		stream   bool
		scenario string
	}{
		{"claude-sonnet-4-5", true, "plain"},
		{"claude-sonnet-4-5", false, "plain"},
		{"claude-opus-4-1", true, "long"},
		{"claude-haiku-4-5", false, "write"},
		{"claude-haiku-4-5", true, "two_tools"},
	}
	want := map[string]modelproxy.ModelUsage{}
	var total int64
	for _, c := range calls {
		resp, b := post(t, e.url, "/v1/messages", token, c.scenario, body(c.model, 2048, c.stream))
		wantStatus(t, resp, b, http.StatusOK)
		u := usageOf(t, b)
		if u.InputTokens == 0 || u.OutputTokens == 0 {
			t.Fatalf("%s: no usage in %q", c.model, b)
		}
		cost := e.prices.Lookup(c.model).Cost(u)
		m := want[c.model]
		m.TokenUsage = m.TokenUsage.Add(u)
		m.Microdollars += cost
		want[c.model] = m
		total += cost
	}
	got := e.proxy.Usage("s1")
	if got.AIMicros != total || got.Calls != len(calls) || got.BudgetExhausted {
		t.Errorf("session usage %+v, want %d µ$ over %d calls", got, total, len(calls))
	}
	for model, w := range want {
		if got.Models[model] != w {
			t.Errorf("%s: %+v, want %+v", model, got.Models[model], w)
		}
	}
	if u := ledgerUsage(t, e.ledger); u.AIMicros != total || u.HeldAIMicros != 0 {
		t.Errorf("ledger %+v, want %d µ$ used and nothing held", u, total)
	}
}

// Turns: TurnStart clears the flags and returns the base for Since.
func TestTurnDeltas(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, true))
	base := e.proxy.TurnStart("s1")
	_, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-haiku-4-5", 100, true))
	d := e.proxy.Usage("s1").Since(base)
	u := usageOf(t, b)
	if d.Calls != 1 || len(d.Models) != 1 || d.Models["claude-haiku-4-5"].TokenUsage != u ||
		d.AIMicros != e.prices.Lookup("claude-haiku-4-5").Cost(u) {
		t.Errorf("turn delta %+v, want one haiku call of %+v", d, u)
	}
}

func TestMissingMaxTokensIsSet(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", -1, true))
	wantStatus(t, resp, b, http.StatusOK)
	reqs := e.ms.Requests()
	if len(reqs) != 1 || reqs[0].MaxTokens != modelproxy.DefaultMaxTokens || reqs[0].Body == nil {
		t.Fatalf("upstream saw %+v, want max_tokens %d", reqs, modelproxy.DefaultMaxTokens)
	}
}

// huge_usage reports 5,000,000 output tokens whatever max_tokens says, which the real API never does. The
// proxy cannot stop an upstream from lying, and it will not hide what was reported (settling the
// reservation instead would make the ledger wrong): it records the reported usage, so the ledger goes past
// the limit, and ends the turn. What it must do is clamp max_tokens so that an honest model could not have
// gone past the limit; TestLimitHoldsWhenMaxTokensIsHonoured checks that side.
func TestHugeUsageIsRecordedAndEndsTheTurn(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	const limit = 50_000 // 5 cents
	token := e.proxy.OpenSession("s1", acct, limit)
	e.proxy.TurnStart("s1")
	payload := body("claude-sonnet-4-5", 32_000, true)
	resp, b := post(t, e.url, "/v1/messages", token, "huge_usage", payload)
	wantStatus(t, resp, b, http.StatusOK)

	reqs := e.ms.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	price := e.prices.Lookup("claude-sonnet-4-5")
	worst := billing.Price{Input: price.MaxInput(), Output: price.Output}.Cost(billing.TokenUsage{
		InputTokens: int64(len(reqs[0].Body)), OutputTokens: int64(reqs[0].MaxTokens)})
	if reqs[0].MaxTokens >= 32_000 || reqs[0].MaxTokens < 1 || worst > limit {
		t.Fatalf("forwarded max_tokens %d (worst case %d µ$), want it clamped under the %d µ$ limit", reqs[0].MaxTokens, worst, limit)
	}
	u := usageOf(t, b)
	if u.OutputTokens != modelserver.HugeOutputTokens {
		t.Fatalf("usage %+v", u)
	}
	cost := price.Cost(u)
	if l := ledgerUsage(t, e.ledger); l.AIMicros != cost || l.HeldAIMicros != 0 {
		t.Errorf("ledger %+v, want the reported %d µ$ recorded", l, cost)
	}
	if got := e.proxy.Usage("s1"); !got.BudgetExhausted || got.AIMicros != cost {
		t.Errorf("session %+v, want the turn marked exhausted", got)
	}

	// The next call is refused without reaching the model.
	resp, b = post(t, e.url, "/v1/messages", token, "plain", payload)
	wantRefusal(t, resp, b, "budget")
	if n := len(e.ms.Requests()); n != 1 {
		t.Errorf("%d upstream requests after the refusal, want 1", n)
	}
}

// testPrices make every max_tokens the proxy forwards a multiple of 25: the highest input price is whole
// microdollars per token, so the room left for output is whole microdollars, each buying 25 output
// tokens. The scripted answers report about 22 output tokens whatever max_tokens says, so with these
// prices every clamped call still allows for its answer: the scripted server honours max_tokens, as the
// real API does, and the ledger limit must hold exactly (checkHonoured verifies the premise).
var testPrices = billing.Prices{Default: billing.Price{Input: 3_000_000, Output: 40_000, CacheRead: 300_000, CacheCreation: 3_000_000}}

func TestLimitHoldsWhenMaxTokensIsHonoured(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) { c.Prices = testPrices })
	const limit = 4_000
	token := e.proxy.OpenSession("s1", acct, limit)
	ok := 0
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("never refused")
		}
		resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 32_000, i%2 == 0))
		if resp.StatusCode == http.StatusPaymentRequired {
			wantRefusal(t, resp, b, "budget")
			break
		}
		wantStatus(t, resp, b, http.StatusOK)
		ok++
	}
	checkHonoured(t, e)
	l := ledgerUsage(t, e.ledger)
	if l.AIMicros > limit || l.HeldAIMicros != 0 {
		t.Fatalf("ledger %+v over the %d µ$ limit", l, limit)
	}
	if s := e.proxy.Usage("s1"); s.AIMicros != l.AIMicros || s.Calls != ok || !s.BudgetExhausted {
		t.Errorf("session %+v, ledger %+v, %d calls answered", s, l, ok)
	}
	t.Logf("%d calls, %d of %d µ$ used", ok, l.AIMicros, limit)
}

// checkHonoured asserts the premise of the limit tests: no answer reported more output than the
// max_tokens the proxy forwarded.
func checkHonoured(t testing.TB, e *env) {
	t.Helper()
	e.rec.mu.Lock()
	answers := make([][]byte, len(e.rec.got))
	for i, b := range e.rec.got {
		answers[i] = b.Bytes()
	}
	e.rec.mu.Unlock()
	reqs := e.ms.Requests()
	if len(reqs) != len(answers) {
		t.Fatalf("%d requests, %d answers", len(reqs), len(answers))
	}
	clamped := 0
	for i, r := range reqs {
		if r.Path != "/v1/messages" {
			continue // the proxy's own count_tokens calls
		}
		if out := usageOf(t, answers[i]).OutputTokens; out > int64(r.MaxTokens) {
			t.Fatalf("answer %d reported %d output tokens over max_tokens %d", i, out, r.MaxTokens)
		}
		if r.MaxTokens < 32_000 {
			clamped++
		}
	}
	if clamped == 0 {
		t.Errorf("no call was clamped: the limit was never tight")
	}
}

// Two sessions of one user race for the same budget; the conditional reservation keeps them under it.
func TestConcurrentSessionsNeverOverspend(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) { c.Prices = testPrices })
	const limit = 6_000
	tokens := []string{e.proxy.OpenSession("a", acct, limit), e.proxy.OpenSession("b", acct, limit)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := 0
	for i := range 8 {
		wg.Go(func() {
			for {
				resp, b, err := send(e.url, "/v1/messages", tokens[i%2], "plain", body("claude-sonnet-4-5", 32_000, true))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.StatusCode == http.StatusPaymentRequired {
					return
				}
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d: %s", resp.StatusCode, b)
					return
				}
				mu.Lock()
				answered++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	checkHonoured(t, e)
	l := ledgerUsage(t, e.ledger)
	a, b := e.proxy.Usage("a"), e.proxy.Usage("b")
	if l.AIMicros > limit || l.HeldAIMicros != 0 {
		t.Fatalf("ledger %+v over the %d µ$ limit", l, limit)
	}
	if a.AIMicros+b.AIMicros != l.AIMicros || a.Calls+b.Calls != answered {
		t.Errorf("sessions %d+%d µ$ in %d+%d calls, ledger %d µ$, %d answered", a.AIMicros, b.AIMicros, a.Calls, b.Calls, l.AIMicros, answered)
	}
	t.Logf("%d calls answered, %d of %d µ$ used", answered, l.AIMicros, limit)
}

func TestExhaustedBudgetIsRefusedWithoutUpstream(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, 0)
	for range 3 {
		resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, true))
		wantRefusal(t, resp, b, "budget for this window is exhausted")
	}
	if n := len(e.ms.Requests()); n != 0 {
		t.Errorf("%d upstream requests, want none", n)
	}
	if u := e.proxy.Usage("s1"); !u.BudgetExhausted || u.Calls != 0 || u.AIMicros != 0 {
		t.Errorf("usage %+v", u)
	}
	if u := e.proxy.TurnStart("s1"); u.BudgetExhausted {
		t.Errorf("TurnStart kept the flag: %+v", u)
	}
	if u := e.proxy.Usage("s1"); u.BudgetExhausted {
		t.Errorf("new turn starts exhausted: %+v", u)
	}
}

// A budget with room for the input but not for one output token is refused too, and holds nothing.
func TestTooLittleLeftIsRefused(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, 1) // 1 µ$: less than the input of any request
	resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, true))
	wantRefusal(t, resp, b, "budget")
	if n := len(e.modelCalls()); n != 0 {
		t.Errorf("%d upstream model calls, want none", n)
	}
	if l := ledgerUsage(t, e.ledger); l != (billing.Usage{}) {
		t.Errorf("ledger %+v after a refusal", l)
	}
}

// Near the end of a budget a call whose input the byte bound overstates is not refused: the proxy counts
// its input upstream (count_tokens, free) and lowers max_tokens to what is left after the counted input.
// What it spends stays within the budget; a call whose counted input does not fit is still refused. (Before
// the count, the first call was refused with nothing spent.)
func TestSmallBudgetCountsTheInput(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	payload := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("a", 20_000))
	price := e.prices.Lookup("claude-sonnet-4-5")
	byteBound := price.MaxInput() * int64(len(payload)) / 1_000_000
	const limit = 40_000
	if byteBound <= limit {
		t.Fatalf("the byte bound %d µ$ fits the limit: the test needs it not to", byteBound)
	}
	token := e.proxy.OpenSession("s1", acct, limit)
	resp, b := post(t, e.url, "/v1/messages", token, "plain", payload)
	wantStatus(t, resp, b, http.StatusOK)
	calls := e.modelCalls()
	if len(calls) != 1 || len(e.ms.Requests()) != 2 || e.ms.Requests()[0].Path != "/v1/messages/count_tokens" {
		t.Fatalf("upstream requests %d, model calls %d: want a count, then the call", len(e.ms.Requests()), len(calls))
	}
	if calls[0].MaxTokens >= 4000 || calls[0].MaxTokens < 1 {
		t.Errorf("forwarded max_tokens %d", calls[0].MaxTokens)
	}
	if u := usageOf(t, b); int64(calls[0].MaxTokens)*price.Output+u.InputTokens*price.MaxInput() > limit*1_000_000 {
		t.Errorf("worst case of the forwarded call (%d input tokens, max_tokens %d) is over the limit", u.InputTokens, calls[0].MaxTokens)
	}
	waitFor(t, func() bool { l := ledgerUsage(t, e.ledger); return l.AIMicros > 0 && l.HeldAIMicros == 0 }, func() string {
		return fmt.Sprintf("ledger %+v", ledgerUsage(t, e.ledger))
	})
	if l := ledgerUsage(t, e.ledger); l.AIMicros > limit {
		t.Errorf("spent %d µ$ of %d", l.AIMicros, limit)
	}

	// Calls go on until what is left cannot pay for the counted input: then refused, and only the count
	// went upstream.
	for i := 0; ; i++ {
		if i > 10 {
			t.Fatal("never refused")
		}
		n := len(e.modelCalls())
		resp, b = post(t, e.url, "/v1/messages", token, "plain", payload)
		if resp.StatusCode == http.StatusPaymentRequired {
			wantRefusal(t, resp, b, "budget for this window is exhausted")
			if len(e.modelCalls()) != n {
				t.Errorf("the refused call reached the model")
			}
			break
		}
		wantStatus(t, resp, b, http.StatusOK)
	}
	if l := ledgerUsage(t, e.ledger); l.AIMicros > limit || l.HeldAIMicros != 0 {
		t.Errorf("ledger %+v, limit %d µ$", l, limit)
	}
	// A budget the byte bound fits asks for no count.
	e.ms.Reset()
	token2 := e.proxy.OpenSession("s2", acct, -1)
	resp, b = post(t, e.url, "/v1/messages", token2, "plain", payload)
	wantStatus(t, resp, b, http.StatusOK)
	if n := len(e.ms.Requests()); n != 1 {
		t.Errorf("%d upstream requests for an unlimited budget, want the call alone", n)
	}
}

func TestThinkingBudgetFollowsTheClamp(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	const limit = 50_000
	token := e.proxy.OpenSession("s1", acct, limit)
	payload := `{"model":"claude-sonnet-4-5","max_tokens":16000,"thinking":{"type":"enabled","budget_tokens":10000},"messages":[{"role":"user","content":"hi"}]}`
	resp, b := post(t, e.url, "/v1/messages", token, "plain", payload)
	wantStatus(t, resp, b, http.StatusOK)
	r := e.ms.Requests()[0]
	var fwd struct {
		MaxTokens int `json:"max_tokens"`
		Thinking  struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(r.Body, &fwd); err != nil {
		t.Fatal(err)
	}
	if fwd.MaxTokens >= 10_000 || fwd.Thinking.Type != "enabled" || fwd.Thinking.BudgetTokens != fwd.MaxTokens-1 {
		t.Errorf("forwarded %s", r.Body)
	}
}

func TestSessionToken(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	if again := e.proxy.OpenSession("s1", acct, -1); again != token {
		t.Errorf("reopening changed the token")
	}
	closed := e.proxy.OpenSession("gone", acct, -1)
	e.proxy.CloseSession("gone")
	if fresh := e.proxy.OpenSession("gone", acct, -1); fresh == closed {
		t.Errorf("a closed session's token came back")
	}
	e.proxy.CloseSession("gone")

	for _, tc := range []struct {
		name   string
		header http.Header
		path   string
	}{
		{"none", http.Header{}, "/v1/messages"},
		{"wrong", http.Header{"X-Api-Key": {token + "x"}}, "/v1/messages"},
		{"real key", http.Header{"X-Api-Key": {realKey}}, "/v1/messages"},
		{"closed session", http.Header{"X-Api-Key": {closed}}, "/v1/messages"},
		{"not bearer", http.Header{"Authorization": {"Basic " + token}}, "/v1/messages"},
		{"wrong bearer", http.Header{"Authorization": {"bearer " + token[:len(token)-1]}}, "/v1/messages"},
		{"bearer with a space", http.Header{"Authorization": {"Bearer " + token[:4] + " " + token[4:]}}, "/v1/messages"},
		{"count_tokens", http.Header{}, "/v1/messages/count_tokens"},
		{"unknown path", http.Header{}, "/v1/messages/batches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, e.url+tc.path, strings.NewReader(body("claude-sonnet-4-5", 10, true)))
			req.Header = tc.header
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantStatus(t, resp, b, http.StatusUnauthorized)
			if !bytes.Contains(b, []byte(`"type":"authentication_error"`)) {
				t.Errorf("body %s", b)
			}
		})
	}
	if n := len(e.ms.Requests()); n != 0 {
		t.Errorf("%d upstream requests, want none", n)
	}

	// Authorization: Bearer is the other way to present it, by the one rule (docs/PROTOCOL.md#auth-header):
	// the scheme in any case, spaces or a tab before the token.
	for _, auth := range []string{"Bearer " + token, "bearer " + token, "BEARER\t" + token + " "} {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(body("claude-sonnet-4-5", 10, true)))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("bearer token %q: status %d", auth[:7], resp.StatusCode)
		}
	}
}

func TestRealKeyGoesUpstreamOnly(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	var seen [][]byte
	show := func(resp *http.Response, b []byte) {
		var h bytes.Buffer
		_ = resp.Header.Write(&h)
		seen = append(seen, h.Bytes(), b)
	}
	show(post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, true)))
	show(post(t, e.url, "/v1/messages", token, "write", body("claude-sonnet-4-5", 100, false)))
	show(post(t, e.url, "/v1/messages/count_tokens", token, "plain", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`))
	e.ms.Inject(modelserver.Fault{Status: 401, Message: "invalid x-api-key"})
	show(post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, true)))
	show(post(t, e.url, "/v1/nope", token, "plain", "{}"))

	for _, b := range seen {
		if bytes.Contains(b, []byte(realKey)) {
			t.Errorf("the real key reached the agent: %s", b)
		}
	}
	reqs := e.ms.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d upstream requests, want 4", len(reqs))
	}
	for _, r := range reqs {
		if r.Header.Get("X-Api-Key") != realKey || r.Header.Get("Authorization") != "" {
			t.Errorf("%s upstream credentials: x-api-key %q authorization %q", r.Path, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
		}
		var all bytes.Buffer
		_ = r.Header.Write(&all)
		all.Write(r.Body)
		if bytes.Contains(all.Bytes(), []byte(token)) {
			t.Errorf("the session token went upstream: %s", all.Bytes())
		}
		if r.Header.Get("Anthropic-Version") != "2023-06-01" || r.Header.Get("Anthropic-Beta") != "interleaved-thinking-2025-05-14" {
			t.Errorf("anthropic headers not passed: %v", r.Header)
		}
	}
	// count_tokens is free.
	if reqs[2].Path != "/v1/messages/count_tokens" {
		t.Errorf("third request %s", reqs[2].Path)
	}
	if u := e.proxy.Usage("s1"); u.Calls != 2 {
		t.Errorf("%d metered calls, want 2 (count_tokens and errors are free)", u.Calls)
	}
}

func TestUpstreamErrorPassesThroughAndReleases(t *testing.T) {
	for _, status := range []int{529, 429, 500, 400} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			e := startEnv(t, modelserver.Options{})
			const limit = 100_000
			token := e.proxy.OpenSession("s1", acct, limit)
			e.ms.Inject(modelserver.Fault{Status: status, Header: http.Header{"Retry-After": {"1"}}})
			resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 1000, true))
			wantStatus(t, resp, b, status)
			if sent := e.rec.last(); !bytes.Equal(b, sent) {
				t.Errorf("the agent got %q, the server sent %q", b, sent)
			}
			if resp.Header.Get("Retry-After") != "1" {
				t.Errorf("headers not passed through: %v", resp.Header)
			}
			if l := ledgerUsage(t, e.ledger); l != (billing.Usage{}) {
				t.Errorf("ledger %+v after an error answer, want nothing used or held", l)
			}
			if u := e.proxy.Usage("s1"); u.Calls != 0 || u.BudgetExhausted {
				t.Errorf("usage %+v", u)
			}
		})
	}
}

// A stream the model server cuts after message_start and one delta is settled at what it showed: the
// input tokens, and one output token per delta.
func TestDroppedStreamSettlesObservedUsage(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, 1_000_000)
	e.ms.Inject(modelserver.Fault{Drop: true})
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(body("claude-sonnet-4-5", 1000, true)))
	req.Header.Set("X-Api-Key", token)
	req.Header.Set(modelserver.HeaderScenario, "plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("the cut stream ended cleanly: %q", got)
	}
	u := usageOf(t, got)
	if u.InputTokens == 0 || !bytes.Contains(got, []byte("content_block_delta")) {
		t.Fatalf("the agent saw %q", got)
	}
	want := e.prices.Lookup("claude-sonnet-4-5").Cost(billing.TokenUsage{InputTokens: u.InputTokens, OutputTokens: 1})
	waitFor(t, func() bool { l := ledgerUsage(t, e.ledger); return l.AIMicros == want && l.HeldAIMicros == 0 },
		func() string { return fmt.Sprintf("ledger %+v, want %d µ$", ledgerUsage(t, e.ledger), want) })
	if s := e.proxy.Usage("s1"); s.AIMicros != want || s.Calls != 1 {
		t.Errorf("session %+v", s)
	}
}

// An agent that hangs up mid-stream is charged what the stream showed up to then, and its hold is freed.
func TestAgentLeavingMidStreamSettles(t *testing.T) {
	e := startEnv(t, modelserver.Options{Delay: 20 * time.Millisecond})
	token := e.proxy.OpenSession("s1", acct, 1_000_000)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(body("claude-sonnet-4-5", 4000, true)))
	req.Header.Set("X-Api-Key", token)
	req.Header.Set(modelserver.HeaderScenario, "long")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var seen []byte
	buf := make([]byte, 4096)
	for bytes.Count(seen, []byte("event: content_block_delta")) < 5 {
		n, err := resp.Body.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
	input := usageOf(t, seen).InputTokens
	price := e.prices.Lookup("claude-sonnet-4-5")
	waitFor(t, func() bool { return e.proxy.Usage("s1").Calls == 1 }, func() string { return "never settled" })
	s := e.proxy.Usage("s1")
	out := s.Models["claude-sonnet-4-5"].OutputTokens
	if in := s.Models["claude-sonnet-4-5"].InputTokens; in != input || out < 5 || out > 200 || s.AIMicros != price.Cost(s.Models["claude-sonnet-4-5"].TokenUsage) {
		t.Errorf("settled %+v after the agent left with %d input tokens and 5 deltas", s, input)
	}
	if l := ledgerUsage(t, e.ledger); l.AIMicros != s.AIMicros || l.HeldAIMicros != 0 {
		t.Errorf("ledger %+v, session %d µ$", l, s.AIMicros)
	}
}

func TestLedgerDownRefusesWithoutRetry(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, 1_000_000)
	if err := e.ledger.Close(); err != nil {
		t.Fatal(err)
	}
	resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, true))
	wantRefusal(t, resp, b, "metering is unavailable")
	if n := len(e.ms.Requests()); n != 0 {
		t.Errorf("%d upstream requests, want none", n)
	}
	if u := e.proxy.Usage("s1"); !u.MeteringUnavailable || u.BudgetExhausted {
		t.Errorf("usage %+v", u)
	}
}

func TestBadRequests(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, -1)
	for _, tc := range []struct {
		name, path, body string
		status           int
	}{
		{"not json", "/v1/messages", "nope", http.StatusBadRequest},
		{"two max_tokens", "/v1/messages", `{"model":"m","max_tokens":1,"max_tokens":64000}`, http.StatusBadRequest},
		{"too large", "/v1/messages", `{"model":"m","messages":"` + strings.Repeat("x", modelproxy.MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge},
		{"batches", "/v1/messages/batches", `{}`, http.StatusNotFound},
		{"models", "/v1/models", ``, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, e.url, tc.path, token, "plain", tc.body)
			wantStatus(t, resp, b, tc.status)
			if !bytes.HasPrefix(b, []byte(`{"type":"error","error":{"type":`)) {
				t.Errorf("body %s", b)
			}
		})
	}
	if n := len(e.ms.Requests()); n != 0 {
		t.Errorf("%d upstream requests, want none", n)
	}
	if l := ledgerUsage(t, e.ledger); l != (billing.Usage{}) {
		t.Errorf("ledger %+v", l)
	}
}

func TestStartOnLoopbackOnly(t *testing.T) {
	l, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p, err := modelproxy.New(modelproxy.Config{Upstream: "http://127.0.0.1:1", APIKey: "k", Reserver: l})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.com:0"} {
		if _, err := p.Start(addr); !errors.Is(err, modelproxy.ErrNotLoopback) {
			t.Errorf("Start(%q) = %v, want ErrNotLoopback", addr, err)
		}
	}
	if _, err := modelproxy.New(modelproxy.Config{Upstream: "ftp://x", APIKey: "k", Reserver: l}); !errors.Is(err, modelproxy.ErrInvalidConfig) {
		t.Errorf("bad upstream: %v", err)
	}
}

// waitFor polls cond until it holds or 10 seconds pass.
func waitFor(t testing.TB, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(describe())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counter reads a counter of the proxy's registry with the given label value (0 if absent).
func (e *env) counter(t testing.TB, name, label, value string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A call the budget cannot take while a sibling call holds most of it waits for the sibling to settle
// (for far less than it held) instead of ending the turn.
func TestWaitsForSiblingHolds(t *testing.T) {
	const delay = 5 * time.Millisecond
	e := startEnv(t, modelserver.Options{Delay: delay})
	const limit = 100_000
	token := e.proxy.OpenSession("s1", acct, limit)

	// A holds 6600 output tokens of sonnet (99,000 µ$) plus its input while it streams for over a second.
	aDone := make(chan []byte)
	go func() {
		_, b, err := send(e.url, "/v1/messages", token, "long", body("claude-sonnet-4-5", 6600, true))
		if err != nil {
			t.Error(err)
		}
		aDone <- b
	}()
	waitFor(t, func() bool { return len(e.ms.Requests()) == 1 }, func() string { return "A never reached the model" })
	if l := ledgerUsage(t, e.ledger); limit-l.HeldAIMicros > 1000 {
		t.Fatalf("A holds only %d of %d µ$: the test needs it to hold nearly all", l.HeldAIMicros, limit)
	}

	resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 1000, true))
	wantStatus(t, resp, b, http.StatusOK)
	<-aDone
	reqs := e.ms.Requests()
	if len(reqs) != 2 || reqs[1].Time.Sub(reqs[0].Time) < 200*delay {
		t.Fatalf("B reached the model %v after A, before A could have finished", reqs[1].Time.Sub(reqs[0].Time))
	}
	if u := e.proxy.Usage("s1"); u.BudgetExhausted || u.Calls != 2 {
		t.Errorf("usage %+v", u)
	}
	if l := ledgerUsage(t, e.ledger); l.AIMicros > limit || l.HeldAIMicros != 0 {
		t.Errorf("ledger %+v", l)
	}
}

// A rolling session (the grant's window anchor) charges each call to the window period that contains the
// proxy's clock: a session open across midnight of a daily budget moves to the new day's account.
func TestRollingSessionChargesTheCurrentWindow(t *testing.T) {
	anchor := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := time.Date(2030, 3, 4, 23, 59, 59, 0, time.UTC)
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	start := billing.Account{Issuer: "iss", User: "night", Window: billing.Day, WindowStart: billing.CurrentWindowStart(billing.Day, anchor, now)}
	token := e.proxy.OpenRollingSession("s1", start, anchor, -1)
	call := func() {
		t.Helper()
		resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 256, false))
		wantStatus(t, resp, b, http.StatusOK)
	}
	call()
	mu.Lock()
	now = time.Date(2030, 3, 5, 0, 0, 1, 0, time.UTC)
	mu.Unlock()
	call()
	usage := func(day int) billing.Usage {
		u, err := e.ledger.Usage(context.Background(), billing.Account{Issuer: "iss", User: "night", Window: billing.Day,
			WindowStart: time.Date(2030, 3, day, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// A call is settled right after its response: wait for the holds to turn into usage.
	var d4, d5 billing.Usage
	for deadline := time.Now().Add(10 * time.Second); ; {
		d4, d5 = usage(4), usage(5)
		if (d4.HeldAIMicros == 0 && d5.HeldAIMicros == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d4.AIMicros == 0 || d5.AIMicros == 0 || d4.HeldAIMicros != 0 || d5.HeldAIMicros != 0 {
		t.Fatalf("day 4 %+v, day 5 %+v: want one settled call in each window", d4, d5)
	}
	if got := e.proxy.Usage("s1").AIMicros; got != d4.AIMicros+d5.AIMicros {
		t.Fatalf("session usage %d, want %d (both windows)", got, d4.AIMicros+d5.AIMicros)
	}
}
