// Package spool keeps the usage events the ledger cannot take on local disk and replays them when it is back
// (docs/ARCHITECTURE.md#spool): nothing is lost, and since every event carries its idempotency key, nothing
// is counted twice.
//
// A Spool wraps a billing.Ledger and is one itself (and a billing.Reserver when the ledger is one), so it
// drops in wherever the runner or the scheduler records usage:
//
//   - Record and Settle try the ledger. When it fails with an error wrapping billing.ErrUnavailable, the
//     event is appended to the spool file and fsynced, and the call returns nil: the event is durable and
//     will reach the ledger. Other errors (billing.ErrInvalid) are returned and nothing is spooled.
//   - While the ledger is known to be down (its last answer, to a caller or to the replayer, was
//     unavailable), events are spooled without trying it: only the replayer probes it, so an outage costs
//     a caller at most one timeout, not one per event.
//   - The replayer (started by Open, stopped by Close) delivers spooled events in the order they were
//     spooled, one at a time. When the ledger fails it waits — doubling from MinBackoff to MaxBackoff,
//     jittered — and tries again. Once it gets through, callers go to the ledger directly again while it
//     drains the backlog behind them, so a busy spool drains too; the ledger sums by key, so the order in
//     which events reach it does not matter.
//     Delivered events leave the file by compaction: truncation when nothing is left, otherwise an atomic
//     rewrite (temporary file, fsync, rename) of what remains.
//   - A crash between the ledger accepting an event and the compaction leaves it in the file: the next Open
//     delivers it again and the ledger, finding its key, counts it once. A crash during an append leaves at
//     most a torn last line, which Open cuts off; its Record never returned, so nothing acknowledged is lost.
//   - A spooled Settle keeps its hold id: the replay settles the hold (recording the event once and
//     deleting the hold if it is still there). Until then the hold keeps counting against the budget, at
//     most for its TTL, after which the ledger ignores it anyway: an outage can cost a user headroom for a
//     while, never money, and the usage is counted once either way.
//   - Usage, Reserve and Release pass through: a spooled event is not in Usage until it is replayed.
//
// One Spool owns its file: a second Open of the same path, in this process or another, fails with
// ErrLocked until the first is closed.
package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
)

// Defaults of Options.
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 15 * time.Second
	DefaultTimeout    = 10 * time.Second
)

// Options configures Open. The zero value is usable.
type Options struct {
	// Logger receives the spool's logs; discarded when nil.
	Logger *slog.Logger
	// Metrics registers the spool's metrics when set.
	Metrics prometheus.Registerer
	// Now stamps spooled events recorded without At, so they keep the time they happened (time.Now when
	// nil).
	Now func() time.Time
	// MinBackoff is the first wait after the ledger failed a replay (DefaultMinBackoff when zero);
	// MaxBackoff bounds the doubling (DefaultMaxBackoff when zero). Each wait is jittered down to half.
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one replayed delivery (DefaultTimeout when zero).
	Timeout time.Duration
}

// Spool is a billing.Ledger and billing.Reserver that spools what its ledger cannot take. Safe for
// concurrent use.
type Spool struct {
	ledger   billing.Ledger
	reserver billing.Reserver // nil when the ledger holds no budget
	path     string
	log      *slog.Logger
	now      func() time.Time
	opts     Options
	m        metrics
	lockFile *os.File

	// syncMu serializes fsyncs, compactions and Close: an appender fsyncs whatever was written before it
	// (group commit). It is taken before mu.
	syncMu  sync.Mutex
	synced  uint64 // lines known durable (written or compacted away)
	syncErr error  // the last fsync's error, for the appenders it covered

	mu        sync.Mutex
	f         *os.File // the spool file, opened for appending
	queue     []entry  // spooled and not yet delivered, oldest first
	delivered int      // entries delivered since the last compaction: still in the file, no longer queued
	written   uint64   // lines appended, ever
	down      bool     // the ledger's last answer was unavailable: spool without trying it
	size      int64    // bytes of whole lines in the file
	empty     chan struct{}
	closed    bool

	kick   chan struct{} // wakes the replayer now (capacity 1)
	cancel context.CancelFunc
	done   chan struct{} // closed when the replayer returned
}

var (
	_ billing.Ledger   = (*Spool)(nil)
	_ billing.Reserver = (*Spool)(nil)
)

// Open opens (creating if needed) the spool file at path in front of ledger, reads the events a previous
// process left in it — cutting off a torn last line — and starts replaying them. Close stops it. A file
// whose lines before the last cannot be read is ErrCorrupt and is left as it is, for an operator; a file
// another Spool has open is ErrLocked.
func Open(path string, ledger billing.Ledger, opts Options) (*Spool, error) {
	if ledger == nil {
		return nil, errors.New("open usage spool: no ledger")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	s := &Spool{
		ledger: ledger, path: path, log: opts.Logger.With("spool", path), now: opts.Now, opts: opts,
		kick: make(chan struct{}, 1), done: make(chan struct{}), empty: make(chan struct{}),
	}
	s.reserver, _ = ledger.(billing.Reserver)
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("open usage spool %s: %w", path, err)
	}
	m, err := newMetrics(opts.Metrics, s.Depth)
	if err != nil {
		s.f.Close()
		s.lockFile.Close()
		return nil, err
	}
	s.m = m
	if len(s.queue) > 0 {
		s.log.Info("replaying usage events left by a previous run", "events", len(s.queue))
		s.wake()
	} else {
		close(s.empty)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.replay(ctx)
	return s, nil
}

// load locks the spool, reads its entries and cuts off a torn tail.
func (s *Spool) load() error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return err
	}
	lf, err := lock(s.path + ".lock")
	if err != nil {
		return err
	}
	// A compaction that crashed before its rename leaves its temporary file: the spool file is whole.
	if err := os.Remove(s.path + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		lf.Close()
		return err
	}
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		lf.Close()
		return err
	}
	fail := func(err error) error {
		f.Close()
		lf.Close()
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fail(err)
	}
	entries, valid, err := parse(data)
	if err != nil {
		return fail(err)
	}
	if valid < len(data) {
		s.log.Warn("dropping a torn last line: an append was cut by a crash before it returned",
			"bytes", len(data)-valid)
		if err := f.Truncate(int64(valid)); err != nil {
			return fail(err)
		}
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return fail(err)
	}
	s.f, s.lockFile, s.queue, s.size = f, lf, entries, int64(valid)
	s.written = uint64(len(entries))
	s.synced = s.written
	return nil
}

// Usage passes through to the ledger: events still in the spool are not counted.
func (s *Spool) Usage(ctx context.Context, acct billing.Account) (billing.Usage, error) {
	return s.ledger.Usage(ctx, acct)
}

// Record stores ev in the ledger, or, when the ledger is unavailable (or known to be), appends it to the
// spool and returns nil once it is on disk. An invalid event wraps billing.ErrInvalid
// and is not spooled; other errors of the ledger are returned as they are. When the spool cannot be
// written either, the error wraps billing.ErrUnavailable. After Close: ErrClosed.
func (s *Spool) Record(ctx context.Context, ev billing.UsageEvent) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return s.deliverOrSpool(entry{ev: ev}, func() error { return s.ledger.Record(ctx, ev) })
}

// deliverOrSpool runs deliver unless the ledger is known to be down, and spools e when it is or deliver
// finds it so.
func (s *Spool) deliverOrSpool(e entry, deliver func() error) error {
	s.mu.Lock()
	closed, down := s.closed, s.down
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("usage event %s: %w", e.ev.Key, ErrClosed)
	}
	if !down {
		err := deliver()
		if err == nil || !errors.Is(err, billing.ErrUnavailable) {
			return err
		}
		s.log.Debug("ledger unavailable: spooling usage event", "key", e.ev.Key, "err", err)
	}
	if err := s.append(e); err != nil {
		return fmt.Errorf("spool usage event %s: %w: %w", e.ev.Key, billing.ErrUnavailable, err)
	}
	return nil
}

// append writes e as one line and returns once it is fsynced. Appenders that arrive while an fsync runs
// share the next one.
func (s *Spool) append(e entry) error {
	if e.ev.At.IsZero() {
		e.ev.At = s.now()
	}
	b, err := e.marshal()
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if n, err := s.f.Write(b); err != nil {
		if n > 0 {
			// A short write (a full disk) leaves a torn line that the next append would glue to itself.
			_ = s.f.Truncate(s.size)
		}
		s.mu.Unlock()
		return err
	}
	s.size += int64(len(b))
	s.written++
	seq := s.written
	wasEmpty := len(s.queue) == 0
	s.queue = append(s.queue, e)
	// Marked with e queued, so the replayer — which probes a known-down ledger — has something to replay,
	// and its next success clears the mark after this.
	s.setDownLocked(true)
	if wasEmpty {
		select {
		case <-s.empty:
			s.empty = make(chan struct{})
		default: // emptied but not yet compacted: whoever waits for it now waits for e too
		}
	}
	s.mu.Unlock()
	s.m.spooled.Inc()

	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced < seq {
		s.mu.Lock()
		f, upTo := s.f, s.written
		s.mu.Unlock()
		s.syncErr = f.Sync()
		if s.syncErr == nil {
			s.synced = upTo
		}
	}
	if s.synced < seq {
		return fmt.Errorf("fsync: %w", s.syncErr)
	}
	if wasEmpty {
		s.wake()
	}
	return nil
}

// Depth is the number of events waiting in the spool.
func (s *Spool) Depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Flush asks the replayer to deliver now and waits until the spool is empty (every event recorded before
// the call is in the ledger) or ctx ends. It is meant for shutdown, after the spool's writers stopped, and
// for tests.
func (s *Spool) Flush(ctx context.Context) error {
	s.mu.Lock()
	empty, closed := s.empty, s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	s.wake()
	select {
	case <-empty:
		return nil
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("flush usage spool: %d events left: %w", s.Depth(), ctx.Err())
	}
}

// Close stops the replayer, compacts what it delivered and closes the file; what is still spooled stays on
// disk for the next Open. Record and Settle fail with ErrClosed afterwards. It is idempotent.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done

	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.delivered > 0 {
		errs = append(errs, s.compactLocked())
	}
	// Appenders still waiting for their fsync find it done.
	if err := s.f.Sync(); err != nil {
		errs = append(errs, err)
	} else {
		s.synced = s.written
	}
	s.syncErr = ErrClosed
	errs = append(errs, s.f.Close(), s.lockFile.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close usage spool %s: %w", s.path, err)
	}
	return nil
}

// setDown records whether the ledger's last answer was unavailable.
func (s *Spool) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setDownLocked(down)
}

func (s *Spool) setDownLocked(down bool) {
	if s.down != down {
		s.down = down
		if down {
			s.log.Warn("ledger unavailable: spooling usage events until it is back")
		} else {
			s.log.Info("ledger back: replaying spooled usage events", "events", len(s.queue))
		}
	}
}

func (s *Spool) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
