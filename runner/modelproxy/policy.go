package modelproxy

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// CLIBetas are the anthropic-beta values the pinned Claude Code CLI (2.1.330) sends on its ordinary calls,
// with a named model and with its default one (TestCLISendsOnlyAllowedBetas keeps this list true). They change neither what a call may reach nor how
// it is billed, so they are always allowed; Config.AllowBetas adds others.
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
}

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
}

func newPolicy(cfg Config) policy {
	return policy{betas: append(slices.Clone(CLIBetas), cfg.AllowBetas...), serverTools: slices.Clone(cfg.AllowServerTools)}
}

// AllowsBeta reports whether the proxy forwards calls carrying the anthropic-beta value b (CLIBetas and
// Config.AllowBetas). A client's session option betas must pass it: the agent sends them on its calls,
// which the proxy would otherwise refuse.
func (p *Proxy) AllowsBeta(b string) bool { return slices.Contains(p.policy.betas, b) }

// check refuses a call the proxy must not forward: a query other than the SDK's beta=true, an
// anthropic-beta value not allowed, a model the session's token does not allow, a server tool not allowed
// or a gated field (mcp_servers, speed, inference_geo, container). Nothing refused reaches the upstream.
func (pol policy) check(r *http.Request, req *messagesRequest, models []string) *apiError {
	if q := r.URL.RawQuery; q != "" && q != "beta=true" {
		e := badRequest("query parameters other than beta=true are not accepted")
		return &e
	}
	for _, v := range r.Header.Values("Anthropic-Beta") {
		for b := range strings.SplitSeq(v, ",") {
			if b = strings.TrimSpace(b); b != "" && !slices.Contains(pol.betas, b) {
				e := badRequest(fmt.Sprintf("anthropic-beta %q is not enabled on this platform", b))
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
	if len(req.gated) > 0 {
		e := badRequest(fmt.Sprintf("%s is not enabled on this platform", req.gated[0]))
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

// bucket is a token bucket: perMinute tokens a minute, holding at most burst. The zero rate allows
// nothing; a negative one everything.
type bucket struct {
	perMinute, burst float64
	tokens           float64
	at               time.Time
}

func newBucket(perMinute int) bucket {
	return bucket{perMinute: float64(perMinute), burst: max(1, math.Floor(float64(perMinute)/4)), tokens: max(1, math.Floor(float64(perMinute)/4))}
}

// take spends one token at now; when none is left it returns how long until one is.
func (b *bucket) take(now time.Time) (ok bool, wait time.Duration) {
	if b.perMinute < 0 {
		return true, 0
	}
	if b.perMinute == 0 {
		return false, time.Minute
	}
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Minutes()*b.perMinute)
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.perMinute * float64(time.Minute))
}

// rateLimited is the 429 the CLI retries after retry-after seconds.
func writeRateLimited(w http.ResponseWriter, what string, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	writeAPIError(w, apiError{http.StatusTooManyRequests, "rate_limit_error", "Warren: too many " + what + " requests in this session; retry later"})
}
