package cockroach_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/internal/testenv"
)

// While the database is down every call fails with ErrUnavailable (the runner spools, the edge refuses new
// sessions); once it is back the same ledger answers again, with nothing lost and nothing counted twice.
func TestServerDownThenBack(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartPostgreSQL(t)
	clock := ledgertest.NewClock(ledgertest.Start.Add(time.Hour))
	l := open(t, srv.CreateDatabase(t), cockroach.Config{Now: clock.Now})
	ledgertest.MustRecord(t, l, ledgertest.AI("before", ledgertest.Day, 10))
	ledgertest.AssertGranted(t, l, "h", ledgertest.Day, 100, 20, 20)

	srv.Stop(t)
	assertUnavailable(t, l)

	srv.Start(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := l.Usage(ctx, ledgertest.Day)
		if err == nil {
			break
		}
		if !errors.Is(err, billing.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Usage after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 10, HeldAIMicros: 20})
	ledgertest.MustRecord(t, l, ledgertest.AI("before", ledgertest.Day, 10)) // a replayed spool: counted once
	ledgertest.MustSettle(t, l, "h", ledgertest.AI("after", ledgertest.Day, 15))
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 25})
}

// An unreachable database (nothing listens) is ErrUnavailable when the ledger is opened.
func TestUnreachableAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := openPoolErr(ctx, "postgres://postgres@"+addr+"/x?sslmode=disable"); err == nil {
		t.Fatal("opened a pool on a closed port")
	}
}

// A COMMIT whose answer is lost leaves the caller not knowing whether it happened. The ledger resolves it
// by running the operation again: the event key or hold id finds what the first run did, so the call
// succeeds and nothing is counted or held twice.
func TestAmbiguousCommitResolvedByKey(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	cutter := newCommitCutter(t, dsn)
	l := open(t, cutter.dsn, cockroach.Config{})

	cut := func(t *testing.T, op string, f func() error) {
		t.Helper()
		before := cutter.cut.Load()
		cutter.armed.Store(1)
		if err := f(); err != nil {
			t.Fatalf("%s with its commit answer lost: %v", op, err)
		}
		if cutter.cut.Load() != before+1 {
			t.Fatalf("%s: no commit was cut", op)
		}
	}
	cut(t, "Record", func() error { return l.Record(ctx, ledgertest.AI("k", ledgertest.Day, 10)) })
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 10})

	var granted int64
	cut(t, "Reserve", func() error {
		var err error
		granted, err = l.Reserve(ctx, "h", ledgertest.Day, 1000, 100, time.Minute)
		return err
	})
	if granted != 100 {
		t.Fatalf("Reserve granted %d, want 100", granted)
	}
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 10, HeldAIMicros: 100})

	cut(t, "Settle", func() error { return l.Settle(ctx, "h", ledgertest.AI("call", ledgertest.Day, 40)) })
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 50})

	ledgertest.AssertGranted(t, l, "r", ledgertest.Day, 1000, 30, 30)
	cut(t, "Release", func() error { return l.Release(ctx, "r") })
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 50})
}

// commitCutter is a TCP proxy in front of PostgreSQL. While armed it forwards a client's COMMIT, reads the
// server's answer (so the transaction did commit), and cuts the connection instead of relaying it.
type commitCutter struct {
	dsn    string // dsn of the database, through the proxy
	target string
	armed  atomic.Int32 // commits left to cut
	cut    atomic.Int32 // commits cut so far
	wg     sync.WaitGroup
}

func newCommitCutter(t *testing.T, dsn string) *commitCutter {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &commitCutter{target: u.Host}
	u.Host = ln.Addr().String()
	p.dsn = u.String()
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			p.wg.Go(func() { p.serve(c, s) })
		}
	})
	// Runs after the cleanups of the pools behind it (registered later), so no client is left.
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *commitCutter) serve(c, s net.Conn) {
	defer c.Close()
	defer s.Close()
	var cutting atomic.Bool
	p.wg.Go(func() { // server to client
		defer c.Close()
		for {
			typ, msg, err := readMessage(s)
			if err != nil {
				return
			}
			if cutting.Load() {
				if typ == 'Z' { // ReadyForQuery: the COMMIT is done; the client never hears of it
					p.cut.Add(1)
					return
				}
				continue
			}
			if _, err := c.Write(msg); err != nil {
				return
			}
		}
	})
	// Client to server: the startup message has no type byte; every later message has one.
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	startup := make([]byte, binary.BigEndian.Uint32(n[:]))
	copy(startup, n[:])
	if _, err := io.ReadFull(c, startup[4:]); err != nil {
		return
	}
	if _, err := s.Write(startup); err != nil {
		return
	}
	for {
		typ, msg, err := readMessage(c)
		if err != nil {
			return
		}
		if typ == 'Q' && bytes.EqualFold(bytes.TrimRight(msg[5:], "\x00"), []byte("commit")) && p.armed.Add(-1) >= 0 {
			cutting.Store(true)
		}
		if _, err := s.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one typed protocol message and returns its type and its bytes, header included.
func readMessage(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	msg := make([]byte, 1+binary.BigEndian.Uint32(hdr[1:]))
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return hdr[0], msg, nil
}
