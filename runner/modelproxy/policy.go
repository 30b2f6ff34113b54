package modelproxy

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/warren-mesh/warren/billing"
)

// CLIBetas are the anthropic-beta values the pinned Claude Code CLI (2.1.330) sends, in every permission
// mode, with a named model and with its default one, from its subagents and when it compacts
// (TestCLIModesPassThePolicy keeps this list exact). They change neither what a call may reach nor how it
// is billed, so they are always allowed; Config.AllowBetas adds others.
var CLIBetas = []string{
	"claude-code-20250219",
	"interleaved-thinking-2025-05-14",
	"context-management-2025-06-27",
	"thinking-token-count-2026-05-13",
	"advanced-tool-use-2025-11-20",
	"thinking-display-updates-2026-08-18",
	// With its default model (an Opus) the CLI sends these three as well.
	"per-turn-control-2026-07-01",
	"mid-conversation-tool-changes-2026-07-01",
	"effort-2025-11-24",
	// With its default model in plan and auto modes, these two and the "safeguards" field: the API
	// classifies the model's tool calls as dangerous or not (the CLI asks before running a flagged one).
	// They can only hold a tool call back, and bill as tokens.
	"dangerous-tool-use-2026-09-03",
	"afk-mode-2026-01-31",
}

// refusedBetas are betas the pinned CLI knows (but did not send in any mode we ran) that the proxy refuses
// even if an operator lists them, with why; the reason goes into the refusal.
var refusedBetas = map[string]string{
	"mcp-servers-2025-12-04":             "the API would reach MCP servers on the caller's behalf",
	"files-api-2025-04-14":               "files are stored under the platform's key, outside any sandbox",
	"web-search-2025-03-05":              "web search is billed per search, which Warren does not price",
	"fast-mode-2026-02-01":               "fast mode is billed above the token prices Warren charges",
	"context-1m-2025-08-07":              "long contexts are billed above the token prices Warren charges",
	"extended-cache-ttl-2025-04-11":      "one-hour cache writes are billed above the token prices Warren charges",
	"advisor-tool-2026-03-01":            "the advisor tool calls another model, billed outside the answer's usage",
	"message-batches-2024-09-24":         "batches are not metered by the proxy",
	"managed-agents-2026-04-01":          "managed agents run outside the sandbox",
	"environments-2025-11-01":            "remote environments run outside the sandbox",
	"ccr-byoc-2025-07-29":                "remote sessions run outside the sandbox",
	"mcp-tunnels-2026-06-22":             "the API would reach MCP servers on the caller's behalf",
	"web-search-results-only-2026-11-15": "web search is billed per search, which Warren does not price",
}

// KnownFields are the top-level Messages API request fields the proxy forwards: those the pinned CLI sends
// in any mode (TestCLIModesPassThePolicy) and the API's other documented sampling fields, all of which
// change only what the model answers, within the tokens it is billed for. Any other top-level field is
// refused (400 naming it) unless Config.AllowFields lists it; gatedKeys are refused always.
var KnownFields = []string{
	"model", "messages", "max_tokens", "system", "metadata", "stream", "tools", "tool_choice", "thinking",
	"stop_sequences", "temperature", "top_k", "top_p",
	"context_management", // clears old thinking and tool results: less input
	"output_config",      // effort and structured output
	"output_format",      // structured output, its older place
	"safeguards",         // the dangerous-tool-use classifier (plan and auto modes)
	"service_tier",       // "auto" and "standard_only" only (serviceTiers)
}

// serviceTiers are the service_tier values forwarded. Both are priced at the price table's (standard)
// prices: "standard_only" is standard capacity, and "auto" is what a call without the field gets anyway
// (priority capacity only for an organisation that bought a priority commitment, which the operator pays
// for up front). Any other value ("priority", "batch", ...) is refused: Warren has no price for it.
var serviceTiers = []string{"auto", "standard_only"}

// Rate defaults: a session's calls per minute, each a token bucket holding a quarter of a minute's worth.
const (
	// DefaultMessagesPerMinute bounds a session's POST /v1/messages. A turn's tool loop makes about one
	// call every few seconds; parallel tool calls and subagents burst above that.
	DefaultMessagesPerMinute = 120
	// DefaultCountTokensPerMinute bounds a session's count_tokens calls, which cost nothing and so are
	// bounded by rate and size instead.
	DefaultCountTokensPerMinute = 30
	// MaxCountTokensBytes bounds a count_tokens body (a full 200k-token context is under 1 MiB of text).
	MaxCountTokensBytes = 2 << 20
)

// policy is what the proxy lets a call name: the runner's allow lists (Config) and the session's models.
type policy struct {
	betas       []string // allowed anthropic-beta values
	serverTools []string // allowed tool type prefixes
	fields      []string // allowed top-level request fields
}

func newPolicy(cfg Config) (policy, error) {
	for _, f := range cfg.AllowFields {
		if slices.Contains(gatedKeys, f) {
			return policy{}, fmt.Errorf("allowed field %q: it is never forwarded (it reaches out or bills beyond tokens): %w", f, ErrInvalidConfig)
		}
	}
	for _, b := range cfg.AllowBetas {
		if why, ok := refusedBetas[b]; ok {
			return policy{}, fmt.Errorf("allowed beta %q: it is never forwarded (%s): %w", b, why, ErrInvalidConfig)
		}
	}
	return policy{betas: append(slices.Clone(CLIBetas), cfg.AllowBetas...), serverTools: slices.Clone(cfg.AllowServerTools),
		fields: append(slices.Clone(KnownFields), cfg.AllowFields...)}, nil
}

// AllowsBeta reports whether the proxy forwards calls carrying the anthropic-beta value b (CLIBetas and
// Config.AllowBetas). A client's session option betas must pass it: the agent sends them on its calls,
// which the proxy would otherwise refuse.
func (p *Proxy) AllowsBeta(b string) bool { return slices.Contains(p.policy.betas, b) }

// check refuses a call the proxy must not forward: a query other than the SDK's beta=true, an
// anthropic-beta value not allowed, a model the session's token does not allow, a server tool not allowed,
// a gated field (mcp_servers, speed, inference_geo, container), a top-level field not allowed or a
// service_tier Warren has no price for. Nothing refused reaches the upstream.
func (pol policy) check(r *http.Request, req *messagesRequest, models []string) *apiError {
	if q := r.URL.RawQuery; q != "" && q != "beta=true" {
		e := badRequest("query parameters other than beta=true are not accepted")
		return &e
	}
	for _, v := range r.Header.Values("Anthropic-Beta") {
		for b := range strings.SplitSeq(v, ",") {
			if b = strings.TrimSpace(b); b != "" && !slices.Contains(pol.betas, b) {
				msg := fmt.Sprintf("anthropic-beta %q is not enabled on this platform", b)
				if why, ok := refusedBetas[b]; ok {
					msg += ": " + why
				}
				e := badRequest(msg)
				return &e
			}
		}
	}
	if len(models) > 0 && !slices.Contains(models, req.model) {
		e := apiError{http.StatusForbidden, "permission_error", fmt.Sprintf("Warren: model %q is not allowed by this token", req.model)}
		return &e
	}
	for _, t := range req.toolTypes {
		if t == "" || t == "custom" {
			continue // a client tool: the agent runs it, the API only names it
		}
		if !slices.ContainsFunc(pol.serverTools, func(p string) bool { return strings.HasPrefix(t, p) }) {
			e := badRequest(fmt.Sprintf("tool type %q is not enabled on this platform", t))
			return &e
		}
	}
	if req.urlSource {
		e := badRequest(`a content block whose source is of type "url" is not enabled on this platform: ` +
			"the API would fetch it, and its tokens are not bounded by the request's size; send the data itself (base64 or text)")
		return &e
	}
	if len(req.gated) > 0 {
		e := badRequest(fmt.Sprintf("%s is not enabled on this platform", req.gated[0]))
		return &e
	}
	for _, k := range req.keys {
		if !slices.Contains(pol.fields, k) {
			e := badRequest(fmt.Sprintf("top-level field %q is not enabled on this platform", k))
			return &e
		}
	}
	if _, ok := req.fields["service_tier"]; ok && !slices.Contains(serviceTiers, req.serviceTier) {
		e := badRequest(fmt.Sprintf("service_tier %q is not enabled on this platform (only %s)", req.serviceTier, strings.Join(serviceTiers, ", ")))
		return &e
	}
	return nil
}

// priceOf is a model's price: the longest matching prefix of the table, else (a model the table does not
// know) the dearest price of every kind in it, so an unknown model is never charged below what it may
// cost.
func (p *Proxy) priceOf(model string) billing.Price {
	if name, price := p.prices.Match(model); name != "" {
		return price
	}
	return p.dearest
}

func dearest(ps billing.Prices) billing.Price {
	d := ps.Default
	for _, p := range ps.Models {
		d = billing.Price{Input: max(d.Input, p.Input), Output: max(d.Output, p.Output),
			CacheRead: max(d.CacheRead, p.CacheRead), CacheCreation: max(d.CacheCreation, p.CacheCreation)}
	}
	return d
}

// bucket is a token bucket (golang.org/x/time/rate, driven by the proxy's clock): perMinute tokens a
// minute, holding a quarter of a minute's worth (at least one), full at first. The zero rate allows
// nothing; a negative one everything.
type bucket struct {
	perMinute int
	lim       *rate.Limiter
}

func newBucket(perMinute int) bucket {
	if perMinute <= 0 {
		return bucket{perMinute: perMinute}
	}
	return bucket{perMinute: perMinute, lim: rate.NewLimiter(rate.Limit(float64(perMinute)/60), max(1, perMinute/4))}
}

// take spends one token at now; when none is left it returns how long until one is.
func (b *bucket) take(now time.Time) (ok bool, wait time.Duration) {
	switch {
	case b.perMinute < 0:
		return true, 0
	case b.perMinute == 0:
		return false, time.Minute
	}
	r := b.lim.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now) // refused: the token is not spent
		return false, wait
	}
	return true, 0
}

// rateLimited is the 429 the CLI retries after retry-after seconds.
func writeRateLimited(w http.ResponseWriter, what string, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	writeAPIError(w, apiError{http.StatusTooManyRequests, "rate_limit_error", "Warren: too many " + what + " requests in this session; retry later"})
}
