package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/registry"
)

// live is a runner this scheduler supervises. The fields under "guarded by Scheduler.mu" change while it
// runs; the others are set before it is published in Scheduler.live and never change.
type live struct {
	entry   registry.Entry
	sb      Sandbox
	stopped chan struct{} // closed when the supervisor finished
	storing sync.Mutex    // serializes storeMeter, so stored is what the placement last received

	// guarded by Scheduler.mu
	to     charging // what its compute is charged to; to.account zero until known
	stored Meter    // what its placement holds as far as this scheduler knows (zero: nothing)
}

func newLive(e registry.Entry, sb Sandbox, to charging) *live {
	return &live{entry: e, sb: sb, to: to, stopped: make(chan struct{})}
}

// id is the runner's SandboxID.
func (l *live) id() string { return registry.SandboxID(l.entry.Issuer, l.entry.User) }

// charging is what a runner's compute is charged to: an account's window, the token's anchor its windows
// roll over from (zero: the account's WindowStart stays) and the compute seconds allowed in a window (< 0
// unlimited; 0 never gets past admission and is not enforced here).
type charging struct {
	account billing.Account
	anchor  time.Time
	limit   int64
}

// charging is what r charges.
func (r Request) charging() charging {
	return charging{account: r.Account, anchor: r.Anchor, limit: r.ComputeLimit}
}

// chargingOf is what p's stored meter charges (an unset meter: no account yet).
func chargingOf(p Placement) charging {
	c := charging{anchor: p.Meter.Anchor, limit: p.Meter.Limit}
	if p.Meter.Set() {
		c.account = billing.Account{Issuer: p.Issuer, User: p.User, Window: p.Meter.Window, WindowStart: p.Meter.WindowStart}
	}
	return c
}

// meter is c as stored with a placement by a scheduler metering in buckets of the given length.
func (c charging) meter(bucket time.Duration) Meter {
	return Meter{Window: c.account.Window, WindowStart: c.account.WindowStart, Anchor: c.anchor, Limit: c.limit,
		Bucket: int64(bucket / time.Second)}
}

// computeKeys is the prefix of the compute events of a sandbox's epoch; the bucket number follows it.
func computeKeys(id string, epoch int64) string {
	return fmt.Sprintf("compute/%s/%d/b", id, epoch)
}

// bucketPart is what one usage event of a bucket charges.
type bucketPart struct {
	acct    billing.Account
	seconds int64  // started seconds
	suffix  string // of the event key after the bucket number
}

// bucketParts charges the time [lo, hi) of one bucket to acct's window: one part, or two when a window
// boundary (rolling from anchor) falls inside it, each charged to its own window (the second keyed with
// suffix "w"). Empty when hi is not after lo.
func bucketParts(lo, hi time.Time, acct billing.Account, anchor time.Time) []bucketPart {
	if !hi.After(lo) {
		return nil
	}
	seconds := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	if anchor.IsZero() || acct.Window == billing.Lifetime {
		return []bucketPart{{acct: acct, seconds: seconds(hi.Sub(lo))}}
	}
	first, second := acct, acct
	first.WindowStart = billing.CurrentWindowStart(acct.Window, anchor, lo)
	second.WindowStart = billing.CurrentWindowStart(acct.Window, anchor, hi.Add(-1))
	if !second.WindowStart.After(lo) {
		return []bucketPart{{acct: first, seconds: seconds(hi.Sub(lo))}}
	}
	return []bucketPart{
		{acct: first, seconds: seconds(second.WindowStart.Sub(lo))},
		{acct: second, seconds: seconds(hi.Sub(second.WindowStart)), suffix: "w"},
	}
}

// maxBucketsPerTick bounds the buckets a supervisor records at one tick (a backlog after a ledger outage,
// or an adoption's re-metering, is caught up over several ticks).
const maxBucketsPerTick = 60

// exitMeterFor bounds how long a supervisor retries recording a runner's last buckets after it exited.
const exitMeterFor = time.Minute

// AdoptBackfill bounds how far back Adopt re-meters an adopted runner: the time no scheduler ran is
// charged up to this much.
const AdoptBackfill = 15 * time.Minute

// bucket is the length of the compute metering buckets: the meter interval in whole seconds, at least one.
func (s *Scheduler) bucket() time.Duration {
	return max(s.cfg.MeterInterval.Truncate(time.Second), time.Second)
}

// charge makes later compute of the user's live sandbox count against c (the newest token's window) and
// stores that with its placement, for a successor scheduler (Adopt). The supervisor uses it at once: when
// the store fails, metering goes on, only a successor would lack it, and the next Ensure tries again.
func (s *Scheduler) charge(ctx context.Context, id string, c charging) {
	if c.account.Issuer == "" {
		return
	}
	s.mu.Lock()
	l := s.live[id]
	if l != nil {
		l.to = c
	}
	s.mu.Unlock()
	if l == nil {
		return
	}
	if err := s.storeMeter(ctx, l); err != nil && !errors.Is(err, ErrStaleEpoch) {
		s.log.Warn("store the sandbox's meter", "issuer", l.entry.Issuer, "user", l.entry.User, "epoch", l.entry.Epoch, "err", err)
	}
}

// storeMeter stores what l's compute is charged to with its placement, unless the placement holds it
// already. It is the one path by which a scheduler stores a meter.
func (s *Scheduler) storeMeter(ctx context.Context, l *live) error {
	l.storing.Lock()
	defer l.storing.Unlock()
	s.mu.Lock()
	m := l.to.meter(s.bucket())
	held := l.stored.Equal(m)
	s.mu.Unlock()
	if held {
		return nil
	}
	if err := s.cfg.Placements.SetMeter(ctx, l.entry.Issuer, l.entry.User, l.entry.Epoch, m); err != nil {
		return err
	}
	s.mu.Lock()
	l.stored = m
	s.mu.Unlock()
	return nil
}

// metering records one supervised runner's compute time to the ledger and stops the runner once the
// compute budget of its window is spent. Only its supervisor calls it.
//
// Compute is metered in buckets aligned to the clock (bucket k is [k·B, (k+1)·B) with B the meter interval
// in whole seconds, Scheduler.bucket): the event of bucket k of a runner is keyed by its sandbox, epoch and
// k, and charges the part of the bucket the runner lived, in started seconds. Two supervisors of one
// runner (a scheduler and its successor overlapping during a deploy) therefore record each bucket once,
// and a successor can re-meter recent buckets (from) without counting any twice. A bucket is recorded once
// it is over; the runner's last one when it exits. A failed write is retried at the next tick under the
// same key (at most maxBucketsPerTick buckets a tick, so a ledger back from an outage is not flooded).
type metering struct {
	s       *Scheduler
	l       *live
	log     *slog.Logger
	keys    string      // usage event keys are keys + bucket number (+ part suffix)
	from    time.Time   // compute before from is not charged by this supervisor
	next    int64       // the first bucket not yet recorded
	failing bool        // the last ledger write or placement read failed (state changes are logged)
	spent   atomic.Bool // a budget stop is under way
}

func (s *Scheduler) newMetering(l *live, from time.Time, log *slog.Logger) *metering {
	return &metering{s: s, l: l, log: log, keys: computeKeys(l.id(), l.entry.Epoch), from: from,
		next: from.UnixNano() / int64(s.bucket())}
}

// due records the buckets that are over by now, and with last also the current one, up to now (the
// runner's exit), then checks the budget. It reports whether everything due was recorded.
func (m *metering) due(now time.Time, last bool) bool {
	if m.s.cfg.Ledger == nil {
		return true
	}
	c, err := m.charging()
	switch {
	case err != nil:
		m.fail("read the placement's meter; retrying", "err", err)
		return false
	case c.account.Issuer == "":
		if last {
			m.log.Warn("the runner exited before its account was known: its compute is not charged")
		}
		return last // not known yet: the buckets wait (next stays)
	}
	recorded, ok := m.recordBuckets(now, last, c)
	if ok && recorded > 0 {
		m.enforce(now, c)
	}
	return ok
}

// charging is what the runner's compute is charged to. An adopted runner whose placement had no meter yet
// (its start was under way) gets it from the placement once stored there, or from an Ensure (charge). An
// error means the placement could not be read (try again); an empty account without one, that the
// placement has none for this epoch.
func (m *metering) charging() (charging, error) {
	s, l := m.s, m.l
	s.mu.Lock()
	c := l.to
	s.mu.Unlock()
	if c.account.Issuer != "" {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	p, err := s.cfg.Placements.Get(ctx, l.entry.Issuer, l.entry.User)
	cancel()
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		return c, err
	case err != nil || p.Epoch != l.entry.Epoch || !p.Meter.Set():
		return c, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.to.account.Issuer == "" { // else an Ensure named it meanwhile
		l.to, l.stored = chargingOf(p), p.Meter
	}
	return l.to, nil
}

// recordBuckets records the buckets due by now (see due) to c, at most maxBucketsPerTick unless last. It
// returns how many events it recorded and whether all due ones were.
func (m *metering) recordBuckets(now time.Time, last bool, c charging) (int, bool) {
	bucket := m.s.bucket()
	recorded := 0
	for {
		start := time.Unix(0, m.next*int64(bucket))
		end := start.Add(bucket)
		if end.After(now) {
			if !last || !now.After(start) {
				break
			}
			end = now
		}
		if !last && recorded >= maxBucketsPerTick {
			break
		}
		lo := start
		if m.from.After(lo) {
			lo = m.from
		}
		for _, part := range bucketParts(lo, end, c.account, c.anchor) {
			ev := billing.UsageEvent{
				Key:     fmt.Sprintf("%s%d%s", m.keys, m.next, part.suffix),
				Account: part.acct, Kind: billing.KindCompute, ComputeSeconds: part.seconds, At: end,
			}
			if !m.record(ev) {
				return recorded, false // the whole bucket again at the next tick: a recorded part is a no-op then
			}
			recorded++
		}
		m.next++
		if end.Equal(now) {
			break
		}
	}
	return recorded, true
}

// record writes one usage event; false means try again later.
func (m *metering) record(ev billing.UsageEvent) bool {
	ctx, cancel := context.WithTimeout(m.s.base, 5*time.Second)
	defer cancel()
	err := m.s.cfg.Ledger.Record(ctx, ev)
	switch {
	case err == nil:
		m.s.metrics.computeSecs.Add(float64(ev.ComputeSeconds))
	case errors.Is(err, billing.ErrInvalid):
		// Retrying cannot make it valid, and it would hold up every later bucket.
		m.log.Error("compute usage event refused: dropped", "key", ev.Key, "compute_seconds", ev.ComputeSeconds, "err", err)
	default:
		m.fail("record compute usage; retrying", "key", ev.Key, "err", err)
		return false
	}
	if m.failing {
		m.log.Info("compute usage recorded again", "key", ev.Key)
	}
	m.failing = false
	return true
}

// fail logs msg when a failure begins (not at each retry).
func (m *metering) fail(msg string, args ...any) {
	if !m.failing {
		m.log.Warn(msg, args...)
	}
	m.failing = true
}

// enforce stops the runner when the compute c allows in the window of now is spent (the sandbox sleeps:
// snapshot, exit).
func (m *metering) enforce(now time.Time, c charging) {
	if c.limit <= 0 || m.spent.Load() { // 0 never gets past admission; < 0 is unlimited
		return
	}
	a := c.account
	if !c.anchor.IsZero() && a.Window != billing.Lifetime {
		a.WindowStart = billing.CurrentWindowStart(a.Window, c.anchor, now)
	}
	ctx, cancel := context.WithTimeout(m.s.base, 5*time.Second)
	u, err := m.s.cfg.Ledger.Usage(ctx, a)
	cancel()
	if err != nil || u.ComputeSeconds < c.limit {
		return
	}
	m.spent.Store(true)
	m.log.Info("compute budget spent; stopping the sandbox", "used_s", u.ComputeSeconds, "limit_s", c.limit)
	m.s.wg.Add(1)
	go m.stopSpent()
}

// stopSpent stops the runner whose budget is spent; a failed stop is tried again at the next record. A
// closing scheduler does not wait for it (a successor checks the budget again).
func (m *metering) stopSpent() {
	defer m.s.wg.Done()
	ctx, cancel := context.WithTimeout(m.s.base, time.Minute)
	defer cancel()
	go func() {
		select {
		case <-m.s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := m.s.cfg.Driver.Stop(ctx, m.l.sb.Alloc); err != nil {
		m.log.Warn("stop the sandbox whose compute budget is spent; retrying at the next record", "err", err)
		m.spent.Store(false)
	}
}

// exit records the rest of the runner's compute up to exitAt, retrying for up to exitMeterFor while the
// ledger does not answer (once more and no longer when the scheduler closes).
func (m *metering) exit(exitAt time.Time) {
	for deadline := time.Now().Add(exitMeterFor); !m.due(exitAt, true) && time.Now().Before(deadline); {
		select {
		case <-time.After(time.Second):
		case <-m.s.stop:
			if !m.due(exitAt, true) {
				m.log.Warn("scheduler closing: the runner's last compute seconds are not recorded")
			}
			deadline = time.Time{}
		}
	}
}
