package spool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/spool"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

// fast replays at once and retries often, so tests wait milliseconds for a ledger that is back.
var fast = spool.Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Timeout: 5 * time.Second}

// openLedger opens the SQLite ledger cfg describes for the test's duration.
func openLedger(t testing.TB, cfg sqlite.Config) *sqlite.Ledger {
	t.Helper()
	l, err := sqlite.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// downLedger is a real ledger whose database has gone away: every call fails with ErrUnavailable.
func downLedger(t testing.TB, path string) *sqlite.Ledger {
	t.Helper()
	l := openLedger(t, sqlite.Config{Path: path})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return l
}

func openSpool(t testing.TB, path string, l billing.Ledger, opts spool.Options) *spool.Spool {
	t.Helper()
	s, err := spool.Open(path, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func mustClose(t testing.TB, s *spool.Spool) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func flush(t testing.TB, s *spool.Spool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// The spool is a ledger and a reserver like any other while the ledger answers.
func TestContract(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) billing.Ledger {
		dir := t.TempDir()
		return openSpool(t, filepath.Join(dir, "spool"), openLedger(t, sqlite.Config{Path: filepath.Join(dir, "ledger.db")}), fast)
	})
}

func TestReserverContract(t *testing.T) {
	ledgertest.RunReserver(t, func(t *testing.T, clock *ledgertest.Clock) ledgertest.ReserverLedger {
		dir := t.TempDir()
		l := openLedger(t, sqlite.Config{Path: filepath.Join(dir, "ledger.db"), Now: clock.Now})
		return openSpool(t, filepath.Join(dir, "spool"), l, fast)
	})
}

// While the ledger is down, Record and Settle succeed by spooling; invalid events are refused as before.
// A later process replays them into the ledger, counting each once, and empties the file.
func TestSpoolThenReplayAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ledgerPath, spoolPath := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "spool")
	s := openSpool(t, spoolPath, downLedger(t, ledgerPath), fast)

	if _, err := s.Usage(ctx, ledgertest.Day); !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("Usage of a down ledger: %v, want ErrUnavailable", err)
	}
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				ev := ledgertest.AI(fmt.Sprintf("ai-%d-%d", w, i), ledgertest.Day, 10)
				if i%2 == 1 {
					ev = ledgertest.Compute(fmt.Sprintf("compute-%d-%d", w, i), ledgertest.Day, 3)
				}
				var err error
				if i%5 == 0 {
					err = s.Settle(ctx, fmt.Sprintf("hold-%d-%d", w, i), ev)
				} else {
					err = s.Record(ctx, ev)
				}
				if err != nil {
					t.Errorf("%s while the ledger is down: %v", ev.Key, err)
				}
			}
		})
	}
	wg.Wait()
	// A redelivery of a spooled event is spooled again and still counts once.
	if err := s.Record(ctx, ledgertest.AI("ai-0-0", ledgertest.Day, 10)); err != nil {
		t.Fatal(err)
	}
	bad := ledgertest.AI("", ledgertest.Day, 1)
	if err := s.Record(ctx, bad); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Record without key: %v, want ErrInvalid", err)
	}
	if err := s.Settle(ctx, "", ledgertest.AI("k", ledgertest.Day, 1)); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Settle without hold: %v, want ErrInvalid", err)
	}
	if d := s.Depth(); d != workers*each+1 {
		t.Fatalf("Depth %d, want %d", d, workers*each+1)
	}
	mustClose(t, s)
	if err := s.Record(ctx, ledgertest.AI("late", ledgertest.Day, 1)); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("Record after Close: %v, want ErrClosed", err)
	}

	l := openLedger(t, sqlite.Config{Path: ledgerPath})
	s = openSpool(t, spoolPath, l, fast)
	flush(t, s)
	want := billing.Usage{AIMicros: workers * ((each + 1) / 2) * 10, ComputeSeconds: workers * (each / 2) * 3}
	ledgertest.AssertUsage(t, l, ledgertest.Day, want)
	if n := fileSize(t, spoolPath); n != 0 {
		t.Errorf("spool file holds %d bytes after the replay, want 0", n)
	}
}

// Replay keeps the order of spooling, and an event spooled without a time keeps the time it was spooled
// at rather than the time of its replay.
func TestReplayInOrder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ledgerPath, spoolPath := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "spool")
	spooledAt := time.Date(2030, 3, 4, 5, 6, 7, 0, time.UTC)
	opts := fast
	opts.Now = func() time.Time { return spooledAt }
	s := openSpool(t, spoolPath, downLedger(t, ledgerPath), opts)
	var keys []string
	for i := range 40 {
		ev := ledgertest.AI(fmt.Sprintf("ev-%02d", 39-i), ledgertest.Day, int64(i))
		if i == 7 {
			ev.At = time.Time{}
		}
		if err := s.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ev.Key)
	}
	mustClose(t, s)

	flush(t, openSpool(t, spoolPath, openLedger(t, sqlite.Config{Path: ledgerPath}), opts))
	db, err := sqlitedb.Open(ctx, ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT key FROM usage_events ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if !slices.Equal(got, keys) {
		t.Fatalf("ledger received\n%v\nwant\n%v", got, keys)
	}
	var at int64
	if err := db.QueryRowContext(ctx, `SELECT at FROM usage_events WHERE key = ?`, keys[7]).Scan(&at); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(0, at).UTC(); !got.Equal(spooledAt) {
		t.Errorf("event without time recorded at %v, want the spooling time %v", got, spooledAt)
	}
}

// A crash during an append leaves a torn last line. Open cuts it off (its Record never returned), keeps
// every whole line, and later appends start on a line of their own.
func TestTornLastLineIgnored(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, tail string }{
		{"half a line", `{"key":"torn","hold":"","issuer":"iss","user":"u","win`},
		{"whole line without newline", `{"key":"torn","issuer":"iss","user":"u","window":"lifetime","kind":"ai","ai_micros":5,"compute_seconds":0,"at":"2030-03-04T00:01:00Z"}`},
		{"zeros", "\x00\x00\x00\x00\x00\x00\x00\x00"},
		{"zeros and newline", "\x00\x00\x00\x00\n"},
		{"garbage lines", "{\"key\":\"to\n\x00\x00\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ledgerPath, spoolPath := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "spool")
			down := downLedger(t, ledgerPath)
			s := openSpool(t, spoolPath, down, fast)
			for i := range 5 {
				if err := s.Record(ctx, ledgertest.AI(fmt.Sprintf("ev-%d", i), ledgertest.Day, 100)); err != nil {
					t.Fatal(err)
				}
			}
			mustClose(t, s)
			whole := fileSize(t, spoolPath)
			appendFile(t, spoolPath, tc.tail)

			s = openSpool(t, spoolPath, down, fast)
			if d := s.Depth(); d != 5 {
				t.Fatalf("Depth %d after reopening, want the 5 whole lines", d)
			}
			if n := fileSize(t, spoolPath); n != whole {
				t.Fatalf("file is %d bytes after reopening, want %d: the torn tail stayed", n, whole)
			}
			if err := s.Record(ctx, ledgertest.AI("after", ledgertest.Day, 1)); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)

			l := openLedger(t, sqlite.Config{Path: ledgerPath})
			s = openSpool(t, spoolPath, l, fast)
			flush(t, s)
			ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 501})
		})
	}
}

// An unreadable line with readable ones after it is not a torn append: Open refuses the file and leaves it
// for an operator instead of dropping usage.
func TestCorruptLineRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ledgerPath, spoolPath := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "spool")
	down := downLedger(t, ledgerPath)
	s := openSpool(t, spoolPath, down, fast)
	for i := range 3 {
		if err := s.Record(ctx, ledgertest.AI(fmt.Sprintf("ev-%d", i), ledgertest.Day, 100)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	b, err := os.ReadFile(spoolPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	corrupt := slices.Concat(lines[0], []byte("not json\n"), lines[1], lines[2])
	if err := os.WriteFile(spoolPath, corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := spool.Open(spoolPath, down, fast); !errors.Is(err, spool.ErrCorrupt) || !strings.Contains(err.Error(), "line 2") {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open: %v, want ErrCorrupt at line 2", err)
	}
	if after, _ := os.ReadFile(spoolPath); !bytes.Equal(after, corrupt) {
		t.Error("Open changed a corrupt spool")
	}
}

// A crash after the ledger took the spooled events but before the spool was compacted leaves them in the
// file: the next process delivers them again and the ledger counts them once.
func TestCrashBeforeCompactCountsOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ledgerPath, spoolPath := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "spool")
	s := openSpool(t, spoolPath, downLedger(t, ledgerPath), fast)
	for i := range 20 {
		if err := s.Record(ctx, ledgertest.Compute(fmt.Sprintf("c-%d", i), ledgertest.Day, 6)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Settle(ctx, "h", ledgertest.AI("settle", ledgertest.Day, 70)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	crashed, err := os.ReadFile(spoolPath)
	if err != nil {
		t.Fatal(err)
	}

	l := openLedger(t, sqlite.Config{Path: ledgerPath})
	want := billing.Usage{AIMicros: 70, ComputeSeconds: 120}
	for run := range 2 {
		s := openSpool(t, spoolPath, l, fast)
		flush(t, s)
		ledgertest.AssertUsage(t, l, ledgertest.Day, want)
		mustClose(t, s)
		if n := fileSize(t, spoolPath); n != 0 {
			t.Fatalf("run %d: spool file holds %d bytes after the replay", run, n)
		}
		// The process "crashed" before compacting: its file still holds every delivered event.
		if err := os.WriteFile(spoolPath, crashed, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A settle spooled during an outage settles its hold on replay: the hold stops counting then, not only at
// its expiry.
func TestSpooledSettleFreesItsHold(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ledgerPath, spoolPath := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "spool")
	clock := ledgertest.NewClock(ledgertest.Start.Add(time.Hour))
	up := openLedger(t, sqlite.Config{Path: ledgerPath, Now: clock.Now})
	s := openSpool(t, spoolPath, up, fast)
	ledgertest.AssertGranted(t, s, "h", ledgertest.Day, 1000, 500, 500)
	if err := up.Close(); err != nil { // the ledger goes away with the hold in it
		t.Fatal(err)
	}
	if err := s.Settle(ctx, "h", ledgertest.AI("call", ledgertest.Day, 120)); err != nil {
		t.Fatalf("Settle while the ledger is down: %v", err)
	}
	if _, err := s.Reserve(ctx, "h2", ledgertest.Day, 1000, 10, time.Minute); !errors.Is(err, billing.ErrUnavailable) {
		t.Errorf("Reserve while the ledger is down: %v, want ErrUnavailable (holds are never spooled)", err)
	}
	mustClose(t, s)

	l := openLedger(t, sqlite.Config{Path: ledgerPath, Now: clock.Now})
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{HeldAIMicros: 500})
	flush(t, openSpool(t, spoolPath, l, fast))
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 120})
}

// One spool per file: a second Open, here or in another process, is refused until the first is closed.
func TestOneSpoolPerFile(t *testing.T) {
	dir := t.TempDir()
	l := openLedger(t, sqlite.Config{Path: filepath.Join(dir, "ledger.db")})
	path := filepath.Join(dir, "spool")
	s := openSpool(t, path, l, fast)
	if s2, err := spool.Open(path, l, fast); !errors.Is(err, spool.ErrLocked) {
		if err == nil {
			s2.Close()
		}
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	mustClose(t, s)
	mustClose(t, s) // idempotent
	openSpool(t, path, l, fast)
}

// Flush waits for the ledger; once it is back (another process's ledger here) everything is delivered.
func TestFlushWaitsForTheLedger(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ledgerPath, spoolPath := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "spool")
	s := openSpool(t, spoolPath, downLedger(t, ledgerPath), fast)
	if err := s.Record(ctx, ledgertest.AI("first", ledgertest.Day, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, ledgertest.AI("second", ledgertest.Day, 2)); err != nil {
		t.Fatal(err)
	}
	if d := s.Depth(); d != 2 {
		t.Fatalf("Depth %d, want 2", d)
	}
	flushCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := s.Flush(flushCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with the ledger down: %v, want the deadline", err)
	}
	mustClose(t, s)
	l := openLedger(t, sqlite.Config{Path: ledgerPath})
	flush(t, openSpool(t, spoolPath, l, fast))
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 3})
}

func appendFile(t testing.TB, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
