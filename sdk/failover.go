package warren

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/coder/websocket"
)

// Failover makes an agent session survive the loss of its edge (docs/PROTOCOL.md#resume): when the
// connection drops for a reason that is not final, the session reconnects, through the next edge of
// Edges, to the same session with the seq of the last message it received, and Next and Events go on as
// one stream: the messages the runner sent meanwhile (a running turn keeps running) are replayed, none is
// lost, none is delivered twice, and the reconnect's own handshake (ready, session_info) is not
// delivered. The zero value of each field is a default.
//
// Not final (reconnected): a network error or a connection that ends without a close frame, the close
// codes 1001 going away, 1012, 1013 and 1014, and any close or error message with code unavailable (an
// edge or runner shutting down, a client too slow to keep up). Final (the session ends as without
// Failover): a normal close, and every other code (unauthenticated, permission_denied, budget_exceeded,
// invalid_argument, not_found, ...). While reconnecting an attempt that fails with a network error, an
// HTTP 5xx, unavailable, timeout, internal, rate_limited or concurrency_limit (the dead edge may still hold
// the user's session lease for a while) moves to the next edge after a backoff; any other error is final.
//
// A send (Send, Prompt, SendMessage, Interrupt, ...) made while the session reconnects waits for the new
// connection, bounded by its ctx and by this policy, and a send whose frame could not be written is
// written again on the next connection (a frame is acted on only when whole). A message whose frame was
// written just before the connection broke may still be lost with it: the events are exactly once, the
// client's messages at most once. A Ping whose connection is lost fails; Close stops a reconnect at once.
type Failover struct {
	// Edges are the edges to reconnect through (base URLs as New takes, e.g. the regions' URLs nearest
	// first: FailoverEdges of the probes Nearest or ProbeRegions measured). The edge the session was
	// dialled through comes first; on a drop the session tries the next edge first (the one that failed
	// is most likely dead or draining) and goes round the list, back to the first, for each further
	// attempt. Empty: only the dialled edge.
	Edges []string
	// MaxAttempts bounds the connection attempts for one outage (default 8); it starts afresh after each
	// successful reconnect.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the wait before each attempt after the first (which is immediate):
	// MinBackoff doubled per attempt up to MaxBackoff, each wait drawn uniformly from its upper half
	// (defaults 250 ms and 10 s), or longer when the last attempt was rate_limited with a
	// details.retry_after_seconds (still within Timeout).
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one outage, all attempts and waits included (default 2 min); DialTimeout bounds one
	// attempt, up to the runner's ready (default 10 s).
	Timeout, DialTimeout time.Duration
	// Context, when set, bounds reconnecting: once it is done no further attempt is made and the session
	// ends with a *FailoverError wrapping its error. It does not end a session that is connected.
	Context context.Context
	// OnEvent, when set, is told of each step (connection lost, attempt failed, reconnected, gave up). It
	// runs on the session's reader: it must return quickly and must not call the session's methods.
	OnEvent func(FailoverEvent)
}

// FailoverKind says what a FailoverEvent reports.
type FailoverKind string

// The steps of a failover.
const (
	FailoverLost        FailoverKind = "lost"        // the connection dropped; Err says why
	FailoverRetry       FailoverKind = "retry"       // an attempt through Edge failed with Err
	FailoverReconnected FailoverKind = "reconnected" // the session resumed through Edge after LastSeq
	FailoverGaveUp      FailoverKind = "gave_up"     // the session ends; Err is the *FailoverError
)

// FailoverEvent is one step of a failover, for Failover.OnEvent.
type FailoverEvent struct {
	Kind    FailoverKind
	Edge    string // the edge lost, tried or reached
	Attempt int    // the attempt's number within the outage (0 for lost)
	LastSeq int64  // the seq of the last message received, from which the session resumes
	Err     error
}

func (e FailoverEvent) String() string {
	switch e.Kind {
	case FailoverReconnected:
		return fmt.Sprintf("reconnected to %s at seq %d (attempt %d)", e.Edge, e.LastSeq, e.Attempt)
	case FailoverLost:
		return fmt.Sprintf("connection to %s lost at seq %d: %v", e.Edge, e.LastSeq, e.Err)
	case FailoverRetry:
		return fmt.Sprintf("attempt %d through %s failed: %v", e.Attempt, e.Edge, e.Err)
	default:
		return fmt.Sprintf("failover %s: %v", e.Kind, e.Err)
	}
}

// FailoverError ends a session whose reconnect did not succeed: the attempts ran out (Exhausted), an
// attempt was answered with a final error (Err, e.g. unauthenticated), or Failover.Context or
// Failover.Timeout ended it (Err wraps the context's error). IsCode and errors.Is see Err, then Lost.
type FailoverError struct {
	SessionID string
	LastSeq   int64 // the seq of the last message received
	Attempts  int
	Exhausted bool  // MaxAttempts attempts all failed
	Err       error // the last attempt's error, or the context's
	Lost      error // what broke the connection
}

func (e *FailoverError) Error() string {
	switch {
	case e.Exhausted:
		return fmt.Sprintf("warren: session %s lost and not resumed: all %d reconnect attempts failed (last seq %d): %v", e.SessionID, e.Attempts, e.LastSeq, e.Err)
	default:
		return fmt.Sprintf("warren: session %s lost and not resumed after %d reconnect attempts (last seq %d): %v", e.SessionID, e.Attempts, e.LastSeq, e.Err)
	}
}

// Unwrap returns the last attempt's error and the error that broke the connection.
func (e *FailoverError) Unwrap() []error { return []error{e.Err, e.Lost} }

// WithFailover makes the sessions the Client dials reconnect as f says when their edge is lost.
func WithFailover(f Failover) Option {
	return func(c *Client) { c.failover = &f }
}

// maxAttempts defaults to 16: with the default backoff, about 100 s of trying, longer than a crashed
// edge's session lease lingers (up to a minute), so a user at its session cap still gets back in.
func (f *Failover) maxAttempts() int { return cmpOr(f.MaxAttempts, 16) }
func (f *Failover) timeout() time.Duration {
	return cmpOr(f.Timeout, 2*time.Minute)
}
func (f *Failover) dialTimeout() time.Duration { return cmpOr(f.DialTimeout, 10*time.Second) }

// backoff is the wait before attempt n (n >= 2).
func (f *Failover) backoff(n int) time.Duration {
	lo, hi := cmpOr(f.MinBackoff, 250*time.Millisecond), cmpOr(f.MaxBackoff, 10*time.Second)
	d := lo
	for i := 2; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// edgeClients are the clients of the failover's edges, the dialled one first, without repeats.
func (c *Client) edgeClients() ([]*Client, error) {
	out := []*Client{c}
	if c.failover == nil {
		return out, nil
	}
	for _, u := range c.failover.Edges {
		e, err := New(u, c.token, WithHTTPClient(c.hc), WithUserAgent(c.ua))
		if err != nil {
			return nil, fmt.Errorf("warren: failover edge: %w", err)
		}
		if c.wt != nil {
			e.wt = &wtState{transport: c.wt.transport, dialTimeout: c.wt.dialTimeout}
		}
		if c.base.Scheme == "https" && e.base.Scheme != "https" {
			// The token would travel in the clear to an edge the app reached over TLS.
			return nil, fmt.Errorf("warren: failover edge %q is not TLS while %q is", u, c.URL())
		}
		if !slices.ContainsFunc(out, func(o *Client) bool { return o.URL() == e.URL() }) {
			out = append(out, e)
		}
	}
	return out, nil
}

// retryableClose reports whether a connection closed with code (as e) may be resumed elsewhere.
func retryableClose(code websocket.StatusCode, e *Error) bool {
	switch code {
	case websocket.StatusGoingAway, websocket.StatusAbnormalClosure, websocket.StatusServiceRestart,
		websocket.StatusTryAgainLater, websocket.StatusBadGateway:
		return true
	}
	return e != nil && e.Code == CodeUnavailable
}

// retryableAttempt reports whether a failed reconnect attempt should be followed by another.
func retryableAttempt(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return !errors.Is(err, errWrongSession) // network errors, a channel closed before ready
	}
	switch e.Code {
	case CodeUnavailable, CodeTimeout, CodeInternal, CodeRateLimited, CodeConcurrencyLimit:
		return true
	}
	return false
}

// retryAfter is the wait an error asks for (details.retry_after_seconds of rate_limited), at most a minute.
func retryAfter(err error) time.Duration {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeRateLimited {
		return 0
	}
	if v, ok := e.Details["retry_after_seconds"].(float64); ok && v > 0 {
		return time.Duration(min(v, 60) * float64(time.Second))
	}
	return 0
}

var errWrongSession = errors.New("warren: the edge resumed another session")

// reconnect runs the failover policy after the connection broke with lost. nil: the session is connected
// again (or is being closed); otherwise the error that ends the session.
func (s *Session) reconnect(ctx context.Context, lost error) error {
	f := s.client.failover
	if f.Context != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(f.Context, cancel)()
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout())
	defer cancel()
	s.mu.Lock()
	from, seq := s.edges[s.cur].URL(), s.recvSeq
	s.mu.Unlock()
	s.notify(FailoverEvent{Kind: FailoverLost, Edge: from, LastSeq: seq, Err: lost})
	fe := &FailoverError{SessionID: s.id, Lost: lost}
	for n := 1; n <= f.maxAttempts(); n++ {
		// The first attempt waits a little too (up to MinBackoff, at most 500 ms), so the clients of a dead
		// edge do not all reach the next one at the same instant.
		wait := rand.N(min(cmpOr(f.MinBackoff, 250*time.Millisecond), 500*time.Millisecond) + 1)
		if n > 1 {
			wait = max(f.backoff(n), retryAfter(fe.Err))
		}
		{
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			if s.isClosing() {
				return nil
			}
			fe.Err = fmt.Errorf("warren: reconnecting: %w", context.Cause(ctx))
			if f.Context != nil && f.Context.Err() != nil {
				fe.Err = fmt.Errorf("warren: reconnecting: %w", f.Context.Err())
			}
			break
		}
		s.mu.Lock()
		s.cur = (s.cur + 1) % len(s.edges)
		c := s.edges[s.cur]
		s.mu.Unlock()
		fe.Attempts = n
		seq, err := s.resumeOn(ctx, c)
		if err == nil {
			s.notify(FailoverEvent{Kind: FailoverReconnected, Edge: c.URL(), Attempt: n, LastSeq: seq})
			return nil
		}
		if s.isClosing() {
			return nil
		}
		fe.Err = err
		s.notify(FailoverEvent{Kind: FailoverRetry, Edge: c.URL(), Attempt: n, LastSeq: seq, Err: err})
		if !retryableAttempt(err) {
			break
		}
		fe.Exhausted = n == f.maxAttempts()
	}
	s.mu.Lock()
	fe.LastSeq = s.recvSeq
	s.mu.Unlock()
	s.notify(FailoverEvent{Kind: FailoverGaveUp, LastSeq: fe.LastSeq, Attempt: fe.Attempts, Err: fe})
	return fe
}

// resumeOn connects to the session through c with the seq of the last message received and, on success,
// makes the new connection the session's. It returns the seq it resumed from.
func (s *Session) resumeOn(ctx context.Context, c *Client) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.client.failover.dialTimeout())
	defer cancel()
	s.mu.Lock()
	seq := s.recvSeq
	s.mu.Unlock()
	conn, err := c.dialChannel(ctx)
	if err != nil {
		return seq, err
	}
	opts := s.opts
	opts.SessionID, opts.LastSeq = s.id, &seq
	opts.ForkSession, opts.Continue, opts.ResumeSessionAt = false, false, ""
	if err := s.handshake(ctx, conn, &opts, true); err != nil {
		conn.CloseNow()
		return seq, err
	}
	if err := s.resendPrompts(ctx, conn); err != nil {
		conn.CloseNow()
		return seq, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn, s.dead = conn, make(chan struct{})
	s.reconnects++
	close(s.up)
	s.up = nil
	return seq, nil
}

func (s *Session) notify(ev FailoverEvent) {
	if f := s.client.failover; f != nil && f.OnEvent != nil {
		f.OnEvent(ev)
	}
}

func (s *Session) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Edge is the base URL of the edge the session is connected through (it changes when it fails over).
func (s *Session) Edge() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.edges[s.cur].URL()
}

// Reconnects is how many times the session failed over to a new connection.
func (s *Session) Reconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconnects
}

// FailoverEdges lists the URLs of the healthy regions that answered, nearest (by median round trip) first:
// the Edges of a Failover for a session dialled through the nearest (listed again, it is tried once per
// round):
//
//	near, probes, err := warren.Nearest(ctx, seedURL, token, 3)
//	...
//	c, err := warren.New(near.URL(), token, warren.WithFailover(warren.Failover{Edges: warren.FailoverEdges(probes)}))
//
// A draining region or one that did not answer is left out.
func FailoverEdges(probes []Probe) []string {
	ok := slices.DeleteFunc(slices.Clone(probes), func(p Probe) bool { return p.Region.Health != "ok" || len(p.RTTs) == 0 })
	slices.SortStableFunc(ok, func(a, b Probe) int { return cmp.Compare(a.Median(), b.Median()) })
	out := make([]string, len(ok))
	for i, p := range ok {
		out[i] = p.Region.URL
	}
	return out
}
