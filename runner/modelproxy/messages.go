package modelproxy

import (
	"context"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/backoff"
)

// serveMessages meters one model call: reserve its worst case, bound it to what was granted, forward it,
// pass the answer through as it streams, then settle what the model reported.
//
// The worst case is bodyBytes × the model's highest input price + max_tokens × its output price: a token
// is at least one byte, so the body's size bounds its input tokens of every kind, and max_tokens bounds
// the output (thinking included). When the ledger grants less, max_tokens is lowered until the worst case
// fits, so a model that honours max_tokens can never cost more than was held, and concurrent calls of
// one account can never overspend its limit together.
func (p *Proxy) serveMessages(w http.ResponseWriter, r *http.Request, s *session) {
	req, ok := p.readRequest(w, r, s, MaxBodyBytes, errTooLarge)
	if !ok {
		return
	}
	body := req.body
	acct, limit := s.budget(p.now())
	price := p.priceOf(req.model)
	pl := plan{acct: acct, limit: limit, worst: billing.Price{Input: price.MaxInput(), Output: price.Output},
		inBytes: int64(len(body)) + bodySlack, maxTokens: req.maxTokens, thinkingBudget: req.thinkingBudget()}
	if pl.maxTokens < 0 {
		pl.maxTokens = DefaultMaxTokens
	}
	pl.want = max(1, pl.worst.Cost(billing.TokenUsage{InputTokens: pl.inBytes, OutputTokens: pl.maxTokens}))
	log := p.log.With("session", s.id, "model", req.model)
	pl.count = func(ctx context.Context) (int64, error) { return p.countedInputBound(ctx, r, req) }

	a, ok := p.admit(w, r, s, log, pl)
	if !ok {
		return
	}
	defer p.holds.done(a.key)
	holdID, granted, fwdMax := a.holdID, a.granted, a.maxTokens
	log = log.With("hold", holdID)
	fwdBody, err := req.withLimits(fwdMax, a.thinking)
	if err == nil && (len(fwdBody) > len(body)+bodySlack ||
		pl.worst.Cost(billing.TokenUsage{InputTokens: a.inBound, OutputTokens: fwdMax}) > granted) {
		err = errors.New("the request cannot be bounded within its reservation")
	}
	if err != nil {
		p.free(r.Context(), log, s, a)
		p.m.rejected.WithLabelValues(rejectInvalid).Inc()
		writeAPIError(w, badRequest(err.Error()))
		return
	}

	// The call may not outlive its hold: cut it while there is still time to settle.
	ctx, cancel := context.WithTimeout(r.Context(), p.callTimeout)
	defer cancel()
	start := time.Now()
	resp, err := p.client.Do(p.upstreamRequest(ctx, r, fwdBody))
	if err != nil {
		p.free(r.Context(), log, s, a)
		if r.Context().Err() == nil {
			log.Warn("model API unreachable", "err", err)
			p.m.rejected.WithLabelValues(rejectUpstream).Inc()
			writeAPIError(w, errUpstream)
		}
		return
	}
	defer resp.Body.Close()
	p.m.upstream.WithLabelValues("headers").Observe(time.Since(start).Seconds())

	copyHeader(w.Header(), resp.Header)
	if resp.StatusCode/100 != 2 {
		// An error answer costs nothing: free the hold, pass the answer on as it is (the CLI decides
		// whether to retry it).
		p.free(r.Context(), log, s, a)
		w.WriteHeader(resp.StatusCode)
		cut, _ := pump(w, resp.Body, nil)
		log.Info("model API answered an error", "status", resp.StatusCode)
		abortIfCut(cut)
		return
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	tap := newUsageTap(mediaType == "text/event-stream")
	w.WriteHeader(resp.StatusCode)
	cut, copyErr := pump(w, resp.Body, tap)
	complete := copyErr == nil
	tap.finish()
	p.m.upstream.WithLabelValues("total").Observe(time.Since(start).Seconds())

	usage := tap.observed()
	cost := price.Cost(usage)
	// A stream shows its usage as it goes, so a stream cut before message_start showed (and most likely
	// cost) nothing. A non-streaming answer comes after the model has done all the work: if its usage
	// cannot be read (cut, too large, not the API's shape), or a stream ended cleanly without any, the whole
	// reservation is charged rather than nothing.
	unknown := !tap.started && (!tap.stream || (complete && !tap.errEvent))
	if unknown {
		cost = granted
		log.Error("answer without readable usage: charging the whole reservation", "granted", granted, "complete", complete)
	}
	overspent := cost > granted
	if overspent {
		// Only an upstream that ignores max_tokens gets here. The usage is recorded as reported, never
		// capped: hiding it would make the ledger lie. The turn is marked so the runner ends it.
		p.m.overspend.Inc()
		log.Error("model reported usage beyond the reservation: recording it and ending the turn",
			"granted", granted, "cost", cost, "max_tokens", fwdMax, "output_tokens", usage.OutputTokens)
	}
	if !complete {
		log.Warn("answer cut short: settling the usage observed", "err", copyErr,
			"input_tokens", usage.InputTokens, "output_tokens", usage.OutputTokens, "cost", cost)
	}
	p.settle(r.Context(), log, holdID, billing.UsageEvent{
		Key: "ai/" + holdID, Account: pl.acct, Kind: billing.KindAI, Model: req.model, AIMicros: cost, At: p.now(),
	})
	if a.grace {
		s.endGrace(granted, cost, a.graceEpoch)
	}
	s.add(req.model, usage, cost, overspent)
	p.m.micros.Add(float64(cost))
	p.m.tokens.WithLabelValues("input").Add(float64(usage.InputTokens))
	p.m.tokens.WithLabelValues("output").Add(float64(usage.OutputTokens))
	p.m.tokens.WithLabelValues("cache_read").Add(float64(usage.CacheReadInputTokens))
	p.m.tokens.WithLabelValues("cache_creation").Add(float64(usage.CacheCreationInputTokens))
	log.Debug("call settled", "want", pl.want, "granted", granted, "max_tokens", fwdMax, "cost", cost,
		"input_tokens", usage.InputTokens, "output_tokens", usage.OutputTokens,
		"cache_read_input_tokens", usage.CacheReadInputTokens, "cache_creation_input_tokens", usage.CacheCreationInputTokens)
	abortIfCut(cut)
}

// plan is what a call may cost: its worst case, and how to bound it.
type plan struct {
	acct  billing.Account
	limit int64
	worst billing.Price // the model's highest input price, and its output price
	// inBytes bounds the call's input tokens: the forwarded body's size bound (a token is at least a
	// byte), or, once counted, the upstream's count with a margin (countedInputBound), if lower.
	inBytes        int64
	maxTokens      int64 // the agent's max_tokens, or DefaultMaxTokens
	thinkingBudget int64 // thinking.budget_tokens of extended thinking, else 0
	want           int64 // the worst case in microdollars, by the byte bound
	// count asks the upstream for a tighter input bound; nil once asked (or in tests of bound).
	count func(context.Context) (int64, error)
}

// fit bounds the call to granted microdollars like bound. When not even a minimal answer fits under the
// byte bound of its input and mayCount is set (the call would be refused otherwise, not wait for sibling
// calls to settle), it asks the upstream to count the input (once per call) and tries again with that
// bound: near the end of a budget a call whose input fits is not refused for the looseness of the byte
// bound. A count that fails leaves the byte bound.
func (pl *plan) fit(ctx context.Context, log *slog.Logger, granted int64, mayCount bool) (maxTokens, thinking int64, ok bool) {
	if maxTokens, thinking, ok = pl.bound(granted); ok || pl.count == nil || !mayCount {
		return maxTokens, thinking, ok
	}
	counted, err := pl.count(ctx)
	pl.count = nil
	if err != nil {
		log.Warn("cannot count the input tokens: keeping the byte bound", "err", err)
		return 0, 0, false
	}
	if counted < pl.inBytes {
		log.Info("budget nearly spent: bounding the input by its count", "bytes", pl.inBytes, "counted", counted)
		pl.inBytes = counted
	}
	return pl.bound(granted)
}

// bound fits the call into granted microdollars: the max_tokens (and, with extended thinking,
// budget_tokens, which must stay below it) to forward. ok is false when not even a minimal answer fits.
func (pl plan) bound(granted int64) (maxTokens, thinking int64, ok bool) {
	if granted >= pl.want { // want is by the byte bound, never below the counted one
		return pl.maxTokens, 0, true
	}
	maxTokens = min(pl.maxTokens, fitOutput(pl.worst, pl.inBytes, granted))
	if maxTokens < minOutputTokens {
		return 0, 0, false
	}
	if pl.thinkingBudget > 0 && pl.thinkingBudget >= maxTokens {
		thinking = maxTokens - 1
		if thinking < minThinkingBudget {
			return 0, 0, false
		}
	}
	return maxTokens, thinking, true
}

// admission is a call the budget took.
type admission struct {
	key       string // the account's key in Proxy.holds
	holdID    string
	granted   int64
	inBound   int64 // the input token bound the call was fitted with (plan.inBytes)
	maxTokens int64
	thinking  int64 // the budget_tokens to forward; 0 to leave thinking alone
	// grace: the ledger was unavailable and the session's grace allowance took the call; holdID was never
	// reserved and granted is held from the grace (taken in graceEpoch).
	grace      bool
	graceEpoch uint64
}

// admit reserves a call's worst case and bounds the call to what was granted. When the budget cannot
// take the call but other calls of the same account, through this proxy, still hold budget, it waits for
// them rather than end the turn: a hold is a worst case and its call usually settles for a fraction of
// it (parallel tool calls and subagents make such siblings common). Only when nothing else is held does
// the budget count as exhausted. ok is false when an answer was written or the agent left.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, s *session, log *slog.Logger, pl plan) (admission, bool) {
	ctx := r.Context()
	key := accountKey(pl.acct)
	deadline := time.Now().Add(p.callTimeout)
	for {
		changed := p.holds.watch() // before reserving, so no settle in between goes unnoticed
		holdID := newHoldID()
		// Bounded, so a ledger that hangs (a partition) counts as unavailable instead of stalling the call.
		rctx, cancel := context.WithTimeout(ctx, settleTimeout)
		granted, err := p.reserver.Reserve(rctx, holdID, pl.acct, pl.limit, pl.want, p.holdTTL)
		cancel()
		if err == nil || errors.Is(err, billing.ErrBudgetExceeded) {
			s.resetGrace() // the ledger answers again
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return admission{}, false // the agent left; a failed Reserve holds nothing
		case errors.Is(err, billing.ErrUnavailable):
			return p.admitGrace(ctx, w, s, log, pl, key, err)
		case err != nil && !errors.Is(err, billing.ErrBudgetExceeded):
			p.m.reservations.WithLabelValues(reserveError).Inc()
			log.Error("cannot reserve budget: refusing the call", "err", err)
			p.refuse(w, s, log, false, "ledger unavailable")
			return admission{}, false
		case err == nil:
			last := p.holds.count(key) == 0 || time.Now().After(deadline) // refused, not waiting, if it does not fit
			if maxTokens, thinking, ok := pl.fit(ctx, log, granted, last); ok {
				p.holds.add(key)
				if granted < pl.want {
					p.m.reservations.WithLabelValues(reserveClamped).Inc()
					log.Info("budget nearly spent: lowering max_tokens", "hold", holdID, "want", pl.want,
						"granted", granted, "max_tokens", pl.maxTokens, "clamped_to", maxTokens)
				} else {
					p.m.reservations.WithLabelValues(reserveGranted).Inc()
				}
				return admission{key: key, holdID: holdID, granted: granted, inBound: pl.inBytes, maxTokens: maxTokens, thinking: thinking}, true
			}
			p.release(ctx, log, holdID)
		}

		// The budget cannot take the call now.
		if p.holds.count(key) == 0 || time.Now().After(deadline) {
			select {
			case <-changed:
				continue // a sibling finished since the Reserve: try again
			default:
			}
			p.m.reservations.WithLabelValues(reserveExceeded).Inc()
			p.refuse(w, s, log, true, "budget exhausted", "want", pl.want, "granted", granted)
			return admission{}, false
		}
		log.Info("budget held by other calls: waiting for them to settle", "want", pl.want, "granted", granted)
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return admission{}, false
		case <-p.done:
			t.Stop()
			writeAPIError(w, errShuttingDown)
			return admission{}, false
		}
	}
}

// admitGrace lets a call through on its session's grace allowance when the ledger cannot be reached
// (docs/ARCHITECTURE.md#grace), bounded exactly like a reservation of what is left of the grace. Its usage is
// settled through the Reserver under a hold id that was never reserved (settling a hold that is gone records
// the event once), which a spool keeps on disk until the ledger is back. When the grace cannot take even a
// minimal answer the call is refused as before: 402, MeteringUnavailable. ok is false when an answer was
// written.
func (p *Proxy) admitGrace(ctx context.Context, w http.ResponseWriter, s *session, log *slog.Logger, pl plan, key string, cause error) (admission, bool) {
	if held, epoch := s.takeGrace(p.grace, pl.want); held > 0 {
		if maxTokens, thinking, ok := pl.fit(ctx, log, held, true); ok {
			p.holds.add(key) // counted like a hold, so that serveMessages's done balances
			p.m.reservations.WithLabelValues(reserveGrace).Inc()
			holdID := newHoldID()
			log.Warn("ledger unavailable: the call goes ahead on the session's grace allowance", "err", cause,
				"hold", holdID, "want", pl.want, "granted", held, "max_tokens", pl.maxTokens, "clamped_to", maxTokens)
			return admission{key: key, holdID: holdID, granted: held, inBound: pl.inBytes, maxTokens: maxTokens, thinking: thinking,
				grace: true, graceEpoch: epoch}, true
		}
		s.endGrace(held, 0, epoch)
	}
	p.m.reservations.WithLabelValues(reserveError).Inc()
	log.Error("cannot reserve budget: refusing the call", "err", cause, "grace", p.grace)
	p.refuse(w, s, log, false, "ledger unavailable")
	return admission{}, false
}

// holds counts, per account, the calls this proxy has reserved for and not yet settled or released.
type holds struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{} // closed and replaced whenever a call ends
}

func accountKey(a billing.Account) string {
	return a.Issuer + "\x00" + a.User + "\x00" + string(a.Window) + "\x00" + strconv.FormatInt(a.WindowStart.UnixNano(), 10)
}

// watch returns a channel closed when any call ends after now.
func (h *holds) watch() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.changed
}

func (h *holds) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[key]
}

func (h *holds) add(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[key]++
}

func (h *holds) done(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[key]--; h.n[key] <= 0 {
		delete(h.n, key)
	}
	if h.changed != nil {
		close(h.changed)
	}
	h.changed = make(chan struct{})
}

// fitOutput is the largest output token count n with worst.Cost(inBytes input, n output) <= granted,
// or -1 when not even the input fits.
func fitOutput(worst billing.Price, inBytes, granted int64) int64 {
	room := granted*1_000_000 - inBytes*worst.Input // Cost rounds up: total <= granted*1e6 is the bound
	if room < 0 {
		return -1
	}
	if worst.Output <= 0 {
		return maxMaxTokens
	}
	return room / worst.Output
}

// refuse answers a call the proxy will not forward and marks the session's turn.
func (p *Proxy) refuse(w http.ResponseWriter, s *session, log *slog.Logger, budget bool, why string, args ...any) {
	s.refused(budget)
	if budget {
		p.m.rejected.WithLabelValues(rejectBudget).Inc()
		log.Info("refusing the call: "+why, args...)
		writeAPIError(w, errBudgetExhausted)
		return
	}
	p.m.rejected.WithLabelValues(rejectLedger).Inc()
	writeAPIError(w, errMeteringDown)
}

// free ends an admitted call that will cost nothing: its grace goes back to the session, or its hold is
// released.
func (p *Proxy) free(ctx context.Context, log *slog.Logger, s *session, a admission) {
	if a.grace {
		s.endGrace(a.granted, 0, a.graceEpoch)
		return
	}
	p.release(ctx, log, a.holdID)
}

// release frees a hold whose call will cost nothing. A failed release is only logged: the hold expires.
func (p *Proxy) release(ctx context.Context, log *slog.Logger, holdID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := p.reserver.Release(ctx, holdID); err != nil {
		log.Warn("cannot release hold: it holds budget until it expires", "err", err)
	}
}

// settle records a call's usage and frees its hold. A spool.Spool as Reserver takes the event onto local
// disk when the ledger is unavailable and answers nil. Otherwise (another Reserver, or a spool that could
// not write) the event, idempotent by key, is retried in the background until it lands or the proxy
// closes; an event given up is logged in full so it can be replayed by hand.
func (p *Proxy) settle(ctx context.Context, log *slog.Logger, holdID string, ev billing.UsageEvent) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	err := p.reserver.Settle(sctx, holdID, ev)
	cancel()
	if err == nil {
		p.m.settles.WithLabelValues("ok").Inc()
		return
	}
	if errors.Is(err, billing.ErrInvalid) || !p.begin() {
		p.lost(log, ev, err)
		return
	}
	log.Warn("cannot settle hold: retrying in the background", "err", err)
	go func() {
		defer p.inflight.Done()
		wait := backoff.New(time.Second, 30*time.Second) // jittered: runners that lost one ledger spread out
		deadline := time.Now().Add(p.holdTTL)
		for {
			select {
			case <-p.done:
				p.lost(log, ev, errors.New("model proxy closed"))
				return
			case <-wait.After():
			}
			ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
			err := p.reserver.Settle(ctx, holdID, ev)
			cancel()
			if err == nil {
				p.m.settles.WithLabelValues("retried").Inc()
				log.Info("hold settled after retrying")
				return
			}
			if errors.Is(err, billing.ErrInvalid) || time.Now().After(deadline) {
				p.lost(log, ev, err)
				return
			}
		}
	}()
}

func (p *Proxy) lost(log *slog.Logger, ev billing.UsageEvent, err error) {
	p.m.settles.WithLabelValues("failed").Inc()
	log.Error("usage event lost: it could not be settled", "err", err, "key", ev.Key,
		"issuer", ev.Account.Issuer, "user", ev.Account.User, "window", ev.Account.Window,
		"window_start", ev.Account.WindowStart, "ai_micros", ev.AIMicros, "at", ev.At)
}
