// Package regionstest is the contract suite for regions.Directory: every adapter's tests call Run.
package regionstest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/regions"
)

// Clock is a settable clock for a directory under test.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// Run runs the suite. open returns a new, empty directory on the given clock and arranges its closing.
func Run(t *testing.T, open func(t *testing.T, now func() time.Time) regions.Directory) {
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	edge := func(region, id string) regions.Edge {
		return regions.Edge{Region: region, ID: id, URL: "wss://" + region + ".example.com", Mesh: "10.0.0.1:4433"}
	}
	t.Run("AnnounceListWithdraw", func(t *testing.T) {
		clock := &Clock{now: start}
		d := open(t, clock.Now)
		for _, e := range []regions.Edge{edge("us", "b"), edge("eu", "a"), edge("us", "a")} {
			if err := d.Announce(ctx, e, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		got := list(t, d)
		if len(got) != 3 || got[0].Region != "eu" || got[1].ID != "a" || got[2].ID != "b" {
			t.Fatalf("edges %+v, want eu/a, us/a, us/b", got)
		}
		if !got[0].Expires.Equal(start.Add(time.Minute)) {
			t.Fatalf("expires %v, want %v", got[0].Expires, start.Add(time.Minute))
		}
		again := edge("eu", "a")
		again.URL, again.WebTransport, again.Mesh, again.Draining = "https://eu2.example.com", "https://eu2.example.com/wt", "10.0.0.2:4433", true
		if err := d.Announce(ctx, again, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		got = list(t, d)
		again.Expires = start.Add(2 * time.Minute)
		if len(got) != 3 || got[0] != again {
			t.Fatalf("after a second announcement: %+v, want %+v first", got, again)
		}
		if err := d.Withdraw(ctx, "us", "a"); err != nil {
			t.Fatal(err)
		}
		if err := d.Withdraw(ctx, "us", "nobody"); err != nil {
			t.Fatalf("withdraw of a missing entry: %v", err)
		}
		if got = list(t, d); len(got) != 2 || got[1].ID != "b" {
			t.Fatalf("after withdrawing us/a: %+v", got)
		}
	})
	t.Run("Expiry", func(t *testing.T) {
		clock := &Clock{now: start}
		d := open(t, clock.Now)
		if err := d.Announce(ctx, edge("eu", "a"), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := d.Announce(ctx, edge("eu", "b"), time.Minute); err != nil {
			t.Fatal(err)
		}
		clock.Advance(30 * time.Second)
		if got := list(t, d); len(got) != 1 || got[0].ID != "b" {
			t.Fatalf("at its expiry eu/a is still listed: %+v", got)
		}
		clock.Advance(2 * time.Hour)
		if got := list(t, d); len(got) != 0 {
			t.Fatalf("expired entries listed: %+v", got)
		}
		if err := d.Announce(ctx, edge("eu", "a"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := list(t, d); len(got) != 1 || got[0].ID != "a" {
			t.Fatalf("announced again: %+v (the long-expired eu/b forgotten)", got)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		d := open(t, (&Clock{now: start}).Now)
		bad := map[string]regions.Edge{
			"region with capitals":  {Region: "EU", ID: "a", URL: "wss://x"},
			"empty region":          {ID: "a", URL: "wss://x"},
			"long region":           {Region: "a23456789012345678901234567890123", ID: "a", URL: "wss://x"},
			"id with a slash":       {Region: "eu", ID: "a/b", URL: "wss://x"},
			"url scheme":            {Region: "eu", ID: "a", URL: "ftp://x"},
			"url with user":         {Region: "eu", ID: "a", URL: "wss://u:p@x"},
			"relative url":          {Region: "eu", ID: "a", URL: "/ws"},
			"webtransport not tls":  {Region: "eu", ID: "a", URL: "wss://x", WebTransport: "http://x/wt"},
			"no host in the url":    {Region: "eu", ID: "a", URL: "http://:7100"},
			"unspecified host":      {Region: "eu", ID: "a", URL: "http://0.0.0.0:7100"},
			"link-local host":       {Region: "eu", ID: "a", URL: "http://169.254.169.254"},
			"url port out of range": {Region: "eu", ID: "a", URL: "http://x:99999"},
			"mesh not host:port":    {Region: "eu", ID: "a", URL: "wss://x", Mesh: "10.0.0.1"},
			"mesh unspecified":      {Region: "eu", ID: "a", URL: "wss://x", Mesh: "[::]:4433"},
		}
		for name, e := range bad {
			if err := d.Announce(ctx, e, time.Minute); !errors.Is(err, regions.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if err := d.Announce(ctx, edge("eu", "a"), 0); !errors.Is(err, regions.ErrInvalid) {
			t.Errorf("ttl 0: %v, want ErrInvalid", err)
		}
		if err := d.Announce(ctx, edge("eu", "a"), regions.MaxTTL+time.Second); !errors.Is(err, regions.ErrInvalid) {
			t.Errorf("ttl over MaxTTL: %v, want ErrInvalid", err)
		}
		if got := list(t, d); len(got) != 0 {
			t.Fatalf("refused announcements stored: %+v", got)
		}
	})
}

func list(t *testing.T, d regions.Directory) []regions.Edge {
	t.Helper()
	got, err := d.Edges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return got
}
