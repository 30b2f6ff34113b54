// Package modelproxy is the agent's only way to the model: a loopback HTTP proxy for the Anthropic
// Messages API that keeps the real API key out of the sandbox (docs/ARCHITECTURE.md#security-boundary) and
// meters every call against the user's budget by reserving its worst case before forwarding it and settling
// its reported usage after (docs/ARCHITECTURE.md#reserve-settle).
//
// The agent (the Claude Code CLI) is pointed at the proxy with ANTHROPIC_BASE_URL and authenticates with a
// per-session token from OpenSession as its API key. The proxy answers refusals itself in the API's error
// shape, choosing statuses the CLI does not retry (see apierror.go and README.md).
package modelproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
)

const (
	// DefaultHoldTTL is Config.HoldTTL when zero. The CLI gives up on a call after 10 minutes
	// (API_TIMEOUT_MS), so a hold rarely needs to outlive it.
	DefaultHoldTTL = 10 * time.Minute
	// MaxBodyBytes bounds a request body, as the API does (32 MB).
	MaxBodyBytes = 32 << 20
	// settleTimeout bounds one Settle or Release; a call's upstream deadline leaves this much of the hold's
	// life for settling, so the hold never expires before it is settled.
	settleTimeout = 10 * time.Second
	// minOutputTokens is the smallest max_tokens worth forwarding when the budget forces a clamp.
	minOutputTokens = 1
	// bodySlack covers the bytes the proxy's own edits (max_tokens inserted or rewritten) add to a body.
	bodySlack = 64
	// DefaultGrace is a suggested Config.Grace: $0.20 per session.
	DefaultGrace = 200_000
)

// Config configures a Proxy; it is validated by New.
type Config struct {
	// Upstream is the Messages API base URL, e.g. https://api.anthropic.com or the scripted model server.
	Upstream string
	// APIKey is the real key. It is only ever sent upstream, as x-api-key.
	APIKey string
	// Reserver holds and settles budget (required). A spool.Spool in front of the ledger keeps the usage
	// of settles the ledger cannot take on local disk until it is back; any other Reserver only retries
	// them from memory while the proxy runs.
	Reserver billing.Reserver
	// Grace is what each session may spend, in microdollars, while the ledger cannot be reached
	// (docs/ARCHITECTURE.md#grace): a call whose Reserve fails with billing.ErrUnavailable goes ahead bounded by
	// what is left of its session's grace, as if that much had been granted, and its usage is settled through
	// Reserver (so it should be a spool.Spool). A session whose grace is spent is refused as before. The grace
	// is whole again once the ledger answers a Reserve. 0 disables it; DefaultGrace is the suggested value.
	Grace int64
	// Prices prices calls by model; the zero value means billing.DefaultPrices().
	Prices billing.Prices
	// HoldTTL is how long a reservation lives (DefaultHoldTTL when zero; at least 30s). A call is cut when
	// only settleTimeout of its hold is left, so no hold expires while its call still runs.
	HoldTTL time.Duration
	// Logger receives the proxy's logs (never tokens or keys); discarded when nil.
	Logger *slog.Logger
	// Now stamps usage events; time.Now when nil.
	Now func() time.Time
	// Client calls the upstream; a client with the default transport when nil. Redirects are never
	// followed (they would carry the key elsewhere).
	Client *http.Client
	// Metrics registers the proxy's metrics when set.
	Metrics prometheus.Registerer

	// AllowBetas are anthropic-beta values allowed besides CLIBetas; any other is refused (400). Enable
	// only betas that neither reach out on the caller's behalf nor bill beyond tokens; the ones known to do
	// either (refusedBetas: mcp-servers-*, files-api-*, fast-mode-*, context-1m-*, ...) cannot be allowed.
	AllowBetas []string
	// AllowFields are top-level request fields allowed besides KnownFields; any other is refused (400
	// naming it). The gated ones (mcp_servers, speed, inference_geo, container) cannot be allowed. Enable
	// only fields that neither reach out on the caller's behalf nor bill beyond tokens.
	AllowFields []string
	// AllowServerTools are tool type prefixes (e.g. "tool_search_tool_") allowed in a request's tools; any
	// other typed tool (web_search_*, code_execution_*, web_fetch_*, bash_*, ...) is refused (400). Warren
	// prices tokens only: enable only tools billed wholly as tokens.
	AllowServerTools []string
	// MessagesPerMinute and CountTokensPerMinute bound each session's calls (token buckets holding a
	// quarter of a minute's worth; 429 rate_limit_error with retry-after beyond): 0 means
	// DefaultMessagesPerMinute and DefaultCountTokensPerMinute, negative unlimited.
	MessagesPerMinute    int
	CountTokensPerMinute int
	// RequireTurn refuses (403 permission_error) the calls of a session with no turn running
	// (TurnStart..TurnEnd), so processes the agent leaves behind cannot spend between turns.
	RequireTurn bool
}

// Proxy is the model proxy. Its methods are safe for concurrent use.
type Proxy struct {
	upstream    *url.URL
	apiKey      string
	reserver    billing.Reserver
	grace       int64
	prices      billing.Prices
	holdTTL     time.Duration
	callTimeout time.Duration
	log         *slog.Logger
	now         func() time.Time
	client      *http.Client
	m           *metrics
	handler     http.Handler
	sess        sessions
	holds       holds
	policy      policy
	dearest     billing.Price
	rates       struct{ messages, counts int }
	requireTurn bool

	mu        sync.Mutex
	closed    bool
	done      chan struct{} // closed by Close: settle retries give up
	inflight  sync.WaitGroup
	srv       *http.Server
	serveDone chan struct{}
}

// New validates cfg and returns a Proxy; serve it with Start or mount Handler.
func New(cfg Config) (*Proxy, error) {
	u, err := url.Parse(cfg.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %q is not an http(s) URL: %w", cfg.Upstream, ErrInvalidConfig)
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("no API key: %w", ErrInvalidConfig)
	}
	if cfg.Reserver == nil {
		return nil, fmt.Errorf("no reserver: %w", ErrInvalidConfig)
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("grace %d microdollars is negative: %w", cfg.Grace, ErrInvalidConfig)
	}
	if cfg.HoldTTL == 0 {
		cfg.HoldTTL = DefaultHoldTTL
	}
	if cfg.HoldTTL < 3*settleTimeout {
		return nil, fmt.Errorf("hold ttl %v is below %v: %w", cfg.HoldTTL, 3*settleTimeout, ErrInvalidConfig)
	}
	if cfg.Prices.Models == nil && cfg.Prices.Default == (billing.Price{}) {
		cfg.Prices = billing.DefaultPrices()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var client http.Client
	if cfg.Client != nil {
		client = *cfg.Client
	} else {
		client.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	pol, err := newPolicy(cfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	timer, err := billing.NewLedgerTimer(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	p := &Proxy{
		upstream:    u,
		apiKey:      cfg.APIKey,
		reserver:    timer.Reserver(cfg.Reserver),
		grace:       cfg.Grace,
		prices:      cfg.Prices,
		holdTTL:     cfg.HoldTTL,
		callTimeout: cfg.HoldTTL - settleTimeout,
		log:         cfg.Logger,
		now:         cfg.Now,
		client:      &client,
		m:           m,
		done:        make(chan struct{}),
		sess:        sessions{byID: map[string]*session{}, byToken: map[[32]byte]*session{}},
		policy:      pol,
		dearest:     dearest(cfg.Prices),
		requireTurn: cfg.RequireTurn,
	}
	p.rates.messages = orDefault(cfg.MessagesPerMinute, DefaultMessagesPerMinute)
	p.rates.counts = orDefault(cfg.CountTokensPerMinute, DefaultCountTokensPerMinute)
	p.handler = http.HandlerFunc(p.serveHTTP)
	return p, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Handler serves the proxy's API: POST /v1/messages (metered), POST /v1/messages/count_tokens
// (forwarded, free), 404 for anything else. Every request needs a session token.
func (p *Proxy) Handler() http.Handler { return p.handler }

// Start listens on addr, which must be a loopback address (e.g. "127.0.0.1:0"), and serves until Close.
// It returns the base URL for ANTHROPIC_BASE_URL, like "http://127.0.0.1:PORT".
func (p *Proxy) Start(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("listen %s: %w", addr, ErrNotLoopback)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", ErrClosed
	}
	if p.srv != nil {
		return "", ErrStarted
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", addr, err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		ln.Close()
		return "", fmt.Errorf("listen %s: bound %s: %w", addr, ip, ErrNotLoopback)
	}
	p.srv = httpx.NewServer(p.handler, httpx.Config{Logger: p.log})
	p.serveDone = make(chan struct{})
	srv, done := p.srv, p.serveDone
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("model proxy stopped serving", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	p.log.Info("model proxy listening", "url", url, "upstream", p.upstream.Redacted())
	return url, nil
}

// Close stops serving (open streams get 5 seconds to finish, then are cut), waits for the calls in
// flight to be settled and stops retrying failed settles (their events are logged as lost). It is
// idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	srv, serveDone := p.srv, p.serveDone
	p.mu.Unlock()

	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		cancel()
		<-serveDone
	}
	close(p.done)
	p.inflight.Wait()
	p.client.CloseIdleConnections()
	return nil
}

// begin counts a request or a settle retry in flight; false once Close has begun.
func (p *Proxy) begin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.inflight.Add(1)
	return true
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.begin() {
		writeAPIError(w, errShuttingDown)
		return
	}
	defer p.inflight.Done()

	s := p.sessionByToken(requestToken(r))
	if s == nil {
		p.m.rejected.WithLabelValues(rejectAuth).Inc()
		writeAPIError(w, errUnauthenticated)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		if p.admitRequest(w, s, false) {
			p.serveMessages(w, r, s)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		if p.admitRequest(w, s, true) {
			p.serveCount(w, r, s)
		}
	default:
		// Batches, files and the rest are refused: they would use the key unmetered.
		p.m.rejected.WithLabelValues(rejectNotFound).Inc()
		writeAPIError(w, errNotFound)
	}
}

// requestToken is the session token the agent sent as its API key: X-Api-Key, else a bearer token by the
// one rule (docs/PROTOCOL.md#auth-header). Sessions are found by the token's SHA-256 (sessionByToken).
func requestToken(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	tok, _ := httpx.BearerOf(r)
	return tok
}

// readBody reads a request body up to limit bytes (tooLarge is the answer beyond); ok is false when an
// error answer was written.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, limit int64, tooLarge apiError) (body []byte, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr):
		p.m.rejected.WithLabelValues(rejectTooLarge).Inc()
		writeAPIError(w, tooLarge)
		return nil, false
	case err != nil:
		p.m.rejected.WithLabelValues(rejectInvalid).Inc()
		writeAPIError(w, badRequest("could not read the request body"))
		return nil, false
	}
	return body, true
}

// readRequest reads and parses a request body and applies the policy (policy.check); ok is false when an
// error answer was written.
func (p *Proxy) readRequest(w http.ResponseWriter, r *http.Request, s *session, limit int64, tooLarge apiError) (*messagesRequest, bool) {
	body, ok := p.readBody(w, r, limit, tooLarge)
	if !ok {
		return nil, false
	}
	req, err := parseMessagesRequest(body)
	if err != nil {
		p.m.rejected.WithLabelValues(rejectInvalid).Inc()
		writeAPIError(w, badRequest(err.Error()))
		return nil, false
	}
	if e := p.policy.check(r, req, s.allowedModels()); e != nil {
		p.m.rejected.WithLabelValues(rejectPolicy).Inc()
		p.log.Info("refusing a call the policy does not allow", "session", s.id, "model", req.model, "why", e.message)
		writeAPIError(w, *e)
		return nil, false
	}
	return req, true
}

// serveCount passes a free count_tokens request through with the real key, once its body (at most
// MaxCountTokensBytes) passed the same policy as a metered call.
func (p *Proxy) serveCount(w http.ResponseWriter, r *http.Request, s *session) {
	req, ok := p.readRequest(w, r, s, MaxCountTokensBytes, errCountTooLarge)
	if !ok {
		return
	}
	body := req.body
	resp, err := p.client.Do(p.upstreamRequest(r.Context(), r, body))
	if err != nil {
		if r.Context().Err() == nil {
			p.log.Warn("model API unreachable", "path", r.URL.Path, "err", err)
			p.m.rejected.WithLabelValues(rejectUpstream).Inc()
			writeAPIError(w, errUpstream)
		}
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	cut, _ := pump(w, resp.Body, nil)
	abortIfCut(cut)
}

// hopHeaders are per-connection headers a proxy must not forward (RFC 9110 §7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te",
	"Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// upstreamRequest is r sent to the upstream with body and the real key, to r's path. The agent's headers
// pass (anthropic-version, anthropic-beta, ...) except its credentials, cookies, hop-by-hop headers and
// Accept-Encoding: the transport negotiates compression itself and hands the proxy plain bytes to read
// usage from.
func (p *Proxy) upstreamRequest(ctx context.Context, r *http.Request, body []byte) *http.Request {
	return p.upstreamRequestTo(ctx, r, r.URL.Path, body)
}

// upstreamRequestTo is upstreamRequest to another path of the API (the proxy's own count_tokens call).
func (p *Proxy) upstreamRequestTo(ctx context.Context, r *http.Request, path string, body []byte) *http.Request {
	u := *p.upstream
	u.Path += path
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	h := r.Header.Clone()
	removeHopHeaders(h)
	for _, name := range []string{"X-Api-Key", "Authorization", "Cookie", "Accept-Encoding", "Content-Length", "Host"} {
		h.Del(name)
	}
	h.Set("X-Api-Key", p.apiKey)
	out := &http.Request{
		Method:        r.Method,
		URL:           &u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Host:          u.Host,
	}
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return out.WithContext(ctx)
}

// copyHeader copies an upstream response's headers for the agent, minus hop-by-hop ones.
func copyHeader(dst, src http.Header) {
	h := src.Clone()
	removeHopHeaders(h)
	for k, vs := range h {
		dst[k] = vs
	}
}

// pump copies body to w as it arrives, flushing after every read so that each SSE event reaches the agent
// as soon as the upstream sent it, and feeds the same bytes to tap. It returns nil when body ended cleanly,
// else the first failure; upstreamCut tells a failed read (the upstream cut the answer) from a failed write
// (the agent left).
func pump(w http.ResponseWriter, body io.Reader, tap io.Writer) (upstreamCut bool, err error) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return false, fmt.Errorf("write to agent: %w", err)
			}
			if err := rc.Flush(); err != nil {
				return false, fmt.Errorf("flush to agent: %w", err)
			}
			if tap != nil {
				_, _ = tap.Write(buf[:n])
			}
		}
		if rerr == io.EOF {
			return false, nil
		}
		if rerr != nil {
			return true, fmt.Errorf("read from model API: %w", rerr)
		}
	}
}

// abortIfCut passes an upstream's cut on to the agent: instead of ending the response cleanly (which
// would make a truncated answer look complete), the connection is dropped.
func abortIfCut(upstreamCut bool) {
	if upstreamCut {
		panic(http.ErrAbortHandler)
	}
}

// newHoldID names one call's reservation; its usage event is "ai/" + the id.
func newHoldID() string { return "mp-" + rand.Text() }
