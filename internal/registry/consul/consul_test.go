package consul_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/registry/registrytest"
	"github.com/warren-mesh/warren/internal/testenv"
)

// Tests share a dev agent where they can; each Registry gets a KV prefix of its own.
var prefixes atomic.Int64

func uniquePrefix() string { return fmt.Sprintf("t%d-%d/", time.Now().UnixNano(), prefixes.Add(1)) }

// open returns a Registry on srv under prefix ("" for a fresh one), closed when t ends.
func open(t testing.TB, srv *testenv.ConsulServer, prefix string, mod func(*consul.Config)) *consul.Registry {
	t.Helper()
	if prefix == "" {
		prefix = uniquePrefix()
	}
	cfg := consul.Config{Addr: srv.Addr(), Prefix: prefix, SessionTTL: 2 * time.Second, LockDelay: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	r, err := consul.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil && srv.Running() {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// rawClient talks to srv directly, as an operator (or another process) would.
func rawClient(t testing.TB, srv *testenv.ConsulServer) *api.Client {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func entry(user string, epoch int64, alloc string) registry.Entry {
	return registry.Entry{Issuer: "iss", User: user, Epoch: epoch, Region: "r1", Alloc: alloc,
		Addr: fmt.Sprintf("127.0.0.1:%d", 20000+epoch), Key: "key-" + alloc, Since: time.Unix(1700000000, 0).UTC()}
}

// waitFor polls cond until it holds, failing t after a generous deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitClosed(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(45 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestContract(t *testing.T) {
	t.Parallel()
	srv := testenv.StartConsul(t)
	registrytest.RunWith(t, func(t *testing.T) registry.Registry { return open(t, srv, "", nil) },
		registrytest.Options{Stop: srv.Stop, Start: srv.Start})
}

func TestContractWatched(t *testing.T) {
	t.Parallel()
	srv := testenv.StartConsul(t)
	registrytest.RunWith(t, func(t *testing.T) registry.Registry {
		return open(t, srv, "", func(c *consul.Config) { c.Watch = true })
	}, registrytest.Options{Stop: srv.Stop, Start: srv.Start})
}

// The contract with Consul's defaults for the lock delay (1 s) and session TTL (10 s): takeovers wait the
// delay out.
func TestContractDefaults(t *testing.T) {
	t.Parallel()
	srv := testenv.StartConsul(t)
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		return open(t, srv, "", func(c *consul.Config) { c.SessionTTL, c.LockDelay = 0, 0 })
	})
}

func TestHold(t *testing.T) {
	t.Parallel()
	srv := testenv.StartConsul(t)
	raw := rawClient(t, srv)
	ctx := context.Background()

	t.Run("ServiceAndCheck", func(t *testing.T) {
		r := open(t, srv, "", func(c *consul.Config) { c.Service = "warren-runner-svc" })
		e := entry("u", 1, "alloc-a")
		l, err := r.Hold(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.Lookup(ctx, "iss", "u"); err != nil || got != e {
			t.Fatalf("Lookup = %+v, %v; want %+v", got, err, e)
		}
		entries, _, err := raw.Health().Service("warren-runner-svc", "", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("%d passing instances, want 1", len(entries))
		}
		svc := entries[0].Service
		if svc.ID != "warren-runner-svc-alloc-a" || svc.Address != "127.0.0.1" || svc.Port != 20001 ||
			svc.Meta["sandbox"] != registry.SandboxID("iss", "u") || svc.Meta["epoch"] != "1" {
			t.Fatalf("service %+v", svc)
		}
		for _, c := range entries[0].Checks {
			if c.Status != api.HealthPassing {
				t.Fatalf("check %s is %s", c.CheckID, c.Status)
			}
		}
		se, _, err := raw.Session().Info(l.Session(), nil)
		if err != nil || se == nil {
			t.Fatalf("session: %+v, %v", se, err)
		}
		if len(se.ServiceChecks) != 1 || se.ServiceChecks[0].ID != "service:"+svc.ID || se.Behavior != api.SessionBehaviorRelease {
			t.Fatalf("session %+v is not bound to the service check", se)
		}
		// The check stays passing past its TTL: the lease updates it.
		time.Sleep(3 * time.Second) // 1.5 session TTLs: without updates the check would be critical
		if entries, _, err := raw.Health().Service("warren-runner-svc", "", true, nil); err != nil || len(entries) != 1 {
			t.Fatalf("after 1.5 TTLs: %d passing instances, %v", len(entries), err)
		}

		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		if isClosed(l.Lost()) {
			t.Fatal("Release closed Lost")
		}
		if _, err := r.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("Lookup after Release = %v, want ErrNotFound", err)
		}
		if svcs, _, _ := raw.Catalog().Service("warren-runner-svc", "", nil); len(svcs) != 0 {
			t.Fatalf("service still registered after Release: %+v", svcs[0])
		}
		if se, _, _ := raw.Session().Info(l.Session(), nil); se != nil {
			t.Fatal("session still there after Release")
		}
	})

	t.Run("LostOnDestroy", func(t *testing.T) {
		r := open(t, srv, "", nil)
		l, err := r.Hold(ctx, entry("u", 1, "a1"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Session().Destroy(l.Session(), nil); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, "Lost after the session was destroyed", l.Lost())
		if _, err := r.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("Lookup = %v, want ErrNotFound", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release after Lost: %v", err)
		}
	})

	t.Run("Takeover", func(t *testing.T) {
		prefix := uniquePrefix()
		a, b := open(t, srv, prefix, nil), open(t, srv, prefix, nil)
		old, err := a.Hold(ctx, entry("u", 1, "a1"))
		if err != nil {
			t.Fatal(err)
		}
		newer, err := b.Hold(ctx, entry("u", 2, "a2"))
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, "the old epoch's Lost", old.Lost())
		if isClosed(newer.Lost()) {
			t.Fatal("the new epoch's lease is lost")
		}
		if newer.LockIndex() <= old.LockIndex() {
			t.Fatalf("LockIndex %d after takeover, was %d", newer.LockIndex(), old.LockIndex())
		}
		if got, err := a.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 2 || got.Alloc != "a2" {
			t.Fatalf("Lookup = %+v, %v", got, err)
		}

		// The old runner coming back, or a rival of the same epoch, is refused and leaves nothing behind.
		sessionsBefore, _, err := raw.Session().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []registry.Entry{entry("u", 1, "a1"), entry("u", 2, "a2-rival")} {
			if _, err := a.Hold(ctx, e); !errors.Is(err, registry.ErrStale) {
				t.Fatalf("Hold %d/%s = %v, want ErrStale", e.Epoch, e.Alloc, err)
			}
		}
		if svcs, _ := raw.Agent().Services(); svcs["warren-runner-a2-rival"] != nil {
			t.Fatal("a refused Hold left its service instance")
		}
		sessionsAfter, _, err := raw.Session().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(sessionsAfter) != len(sessionsBefore) {
			t.Fatalf("%d sessions after refused holds, %d before", len(sessionsAfter), len(sessionsBefore))
		}
		// Releasing the old lease does not touch the new owner.
		if err := old.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 2 {
			t.Fatalf("after the old lease's Release: %+v, %v", got, err)
		}
		// A takeover after an expiry also gets a higher LockIndex, and the expired epoch stays fenced.
		newer.StopRenewing()
		waitClosed(t, "Lost of a lease that stopped renewing", newer.Lost())
		if _, err := a.Hold(ctx, entry("u", 1, "a1")); !errors.Is(err, registry.ErrStale) {
			t.Fatalf("Hold of an older epoch after the owner expired = %v, want ErrStale", err)
		}
		third, err := a.Hold(ctx, entry("u", 3, "a3"))
		if err != nil {
			t.Fatal(err)
		}
		if third.LockIndex() <= newer.LockIndex() {
			t.Fatalf("LockIndex %d after expiry and takeover, was %d", third.LockIndex(), newer.LockIndex())
		}
	})

	// A runner that stops renewing (hung) loses its lock once its check goes critical, and knows it.
	t.Run("LostWhenRenewalStops", func(t *testing.T) {
		r := open(t, srv, "", nil)
		l, err := r.Hold(ctx, entry("u", 1, "hung"))
		if err != nil {
			t.Fatal(err)
		}
		l.StopRenewing()
		waitClosed(t, "Lost of a lease that stopped renewing", l.Lost())
		waitFor(t, "the key to be released", func() bool {
			_, err := r.Lookup(ctx, "iss", "u")
			return errors.Is(err, registry.ErrNotFound)
		})
	})

	// Register's leases are renewed by the Registry: the entry outlives many TTLs.
	t.Run("RegisterRenews", func(t *testing.T) {
		r := open(t, srv, "", func(c *consul.Config) { c.SessionTTL = time.Second })
		if err := r.Register(ctx, entry("u", 1, "a1")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // past twice the TTL, when Consul drops sessions that are not renewed
		if got, err := r.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 1 {
			t.Fatalf("Lookup after 3 TTLs = %+v, %v", got, err)
		}
	})

	// Deregister from another process fences the holder.
	t.Run("DeregisterFencesHolder", func(t *testing.T) {
		prefix := uniquePrefix()
		runner, sched := open(t, srv, prefix, nil), open(t, srv, prefix, nil)
		l, err := runner.Hold(ctx, entry("u", 4, "a4"))
		if err != nil {
			t.Fatal(err)
		}
		if err := sched.Deregister(ctx, "iss", "u", 3); err != nil || isClosed(l.Lost()) {
			t.Fatalf("Deregister of another epoch: %v, lost %v", err, isClosed(l.Lost()))
		}
		if err := sched.Deregister(ctx, "iss", "u", 4); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, "Lost after Deregister", l.Lost())
		if _, err := sched.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("Lookup = %v, want ErrNotFound", err)
		}
	})

	// Deregister of a lease held in the same process fences it too.
	t.Run("DeregisterOwnHold", func(t *testing.T) {
		r := open(t, srv, "", nil)
		l, err := r.Hold(ctx, entry("u", 2, "own"))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Deregister(ctx, "iss", "u", 2); err != nil {
			t.Fatal(err)
		}
		if !isClosed(l.Lost()) {
			t.Fatal("Deregister did not close the Hold lease's Lost")
		}
		if svcs, _ := raw.Agent().Services(); svcs["warren-runner-own"] != nil {
			t.Fatal("service instance left after Deregister")
		}
		if _, err := r.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("Lookup = %v, want ErrNotFound", err)
		}
	})

	// Close releases what the Registry still holds; a Hold lease released that way is lost to its holder.
	t.Run("Close", func(t *testing.T) {
		prefix := uniquePrefix()
		r, other := open(t, srv, prefix, nil), open(t, srv, prefix, nil)
		l, err := r.Hold(ctx, entry("u", 1, "a1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Register(ctx, entry("v", 1, "b1")); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if !isClosed(l.Lost()) {
			t.Fatal("Close did not close the Hold lease's Lost")
		}
		for _, user := range []string{"u", "v"} {
			if _, err := other.Lookup(ctx, "iss", user); !errors.Is(err, registry.ErrNotFound) {
				t.Fatalf("Lookup %s after Close = %v, want ErrNotFound", user, err)
			}
		}
		if _, err := r.Lookup(ctx, "iss", "u"); !errors.Is(err, consul.ErrClosed) {
			t.Fatalf("Lookup on a closed Registry = %v", err)
		}
	})
}

// A lease whose Consul goes away is lost within about a TTL: the runner cannot prove it still owns the
// key.
func TestHoldLostWhenConsulStops(t *testing.T) {
	t.Parallel()
	srv := testenv.StartConsul(t)
	r := open(t, srv, "", nil)
	l, err := r.Hold(context.Background(), entry("u", 1, "a1"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	waitClosed(t, "Lost while Consul is down", l.Lost())
}

func TestWatch(t *testing.T) {
	t.Parallel()
	srv := testenv.StartConsul(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	edge := open(t, srv, prefix, func(c *consul.Config) { c.Watch = true })
	sched := open(t, srv, prefix, nil)

	if _, err := edge.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Lookup = %v, want ErrNotFound", err)
	}
	if err := sched.Register(ctx, entry("u", 1, "a1")); err != nil {
		t.Fatal(err)
	}
	// Found at once (a miss reads Consul), then served from the cache the watch fills.
	if got, err := edge.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 1 {
		t.Fatalf("Lookup right after Register = %+v, %v", got, err)
	}
	waitFor(t, "the watch to cache epoch 1", func() bool { e, ok := edge.Cached("iss", "u"); return ok && e.Epoch == 1 })
	if err := sched.Register(ctx, entry("u", 2, "a2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch to cache epoch 2", func() bool { e, ok := edge.Cached("iss", "u"); return ok && e.Epoch == 2 })
	if err := sched.Deregister(ctx, "iss", "u", 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch to drop the entry", func() bool { _, ok := edge.Cached("iss", "u"); return !ok })
	if _, err := edge.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Lookup after Deregister = %v, want ErrNotFound", err)
	}

	// Invalidate forces a fresh read: a cached entry (here a planted, wrong one) is served until then.
	if err := sched.Register(ctx, entry("v", 5, "a5")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch to cache v", func() bool { _, ok := edge.Cached("iss", "v"); return ok })
	edge.Poison(entry("v", 4, "stale"))
	if got, _ := edge.Lookup(ctx, "iss", "v"); got.Alloc != "stale" {
		t.Fatalf("Lookup = %+v, want the cached entry", got)
	}
	edge.Invalidate("iss", "v")
	if got, err := edge.Lookup(ctx, "iss", "v"); err != nil || got.Epoch != 5 || got.Alloc != "a5" {
		t.Fatalf("Lookup after Invalidate = %+v, %v; want epoch 5", got, err)
	}
}

// Malformed values under the owners prefix are errors for Lookup and skipped by the watch.
func TestMalformedValues(t *testing.T) {
	t.Parallel()
	srv := testenv.StartConsul(t)
	raw := rawClient(t, srv)
	ctx := context.Background()
	prefix := uniquePrefix()
	plain, watched := open(t, srv, prefix, nil), open(t, srv, prefix, func(c *consul.Config) { c.Watch = true })
	// A lock delay longer than twice the Registry's session TTL: the Registry must keep its new session
	// alive while it waits the delay out.
	se, _, err := raw.Session().Create(&api.SessionEntry{TTL: "30s", LockDelay: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(issuer, user, value string) {
		t.Helper()
		ok, _, err := raw.KV().Acquire(&api.KVPair{Key: prefix + "owners/" + registry.SandboxID(issuer, user), Value: []byte(value), Session: se}, nil)
		if err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
	}
	put("iss", "garbage", `{"issuer":"iss","user":"garbage","key":"SECRET`)
	other := rawEntryJSON(entry("someone-else", 1, "a1"))
	put("iss", "moved", other)
	for _, user := range []string{"garbage", "moved"} {
		_, err := plain.Lookup(ctx, "iss", user)
		if !errors.Is(err, consul.ErrBadEntry) || strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("Lookup %s = %v, want ErrBadEntry without the value", user, err)
		}
		if _, err := watched.Lookup(ctx, "iss", user); !errors.Is(err, consul.ErrBadEntry) {
			t.Fatalf("watched Lookup %s = %v, want ErrBadEntry", user, err)
		}
	}
	// A Register replaces a malformed holder.
	if err := plain.Register(ctx, entry("garbage", 1, "a1")); err != nil {
		t.Fatal(err)
	}
	if got, err := watched.Lookup(ctx, "iss", "garbage"); err != nil || got.Epoch != 1 {
		t.Fatalf("Lookup after Register = %+v, %v", got, err)
	}
}

func rawEntryJSON(e registry.Entry) string {
	return fmt.Sprintf(`{"issuer":%q,"user":%q,"epoch":%d,"alloc":%q,"addr":%q,"key":%q}`,
		e.Issuer, e.User, e.Epoch, e.Alloc, e.Addr, e.Key)
}

// No Consul at the address: calls fail at once with ErrUnavailable. Runs without a server.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r, err := consul.New(consul.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Lookup = %v, want ErrUnavailable", err)
	}
	if err := r.Register(ctx, entry("u", 1, "a1")); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Register = %v, want ErrUnavailable", err)
	}
	if _, err := r.Hold(ctx, entry("u", 1, "a1")); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Hold = %v, want ErrUnavailable", err)
	}
}

// How Consul's answers are classified, with a stand-in for the agent's HTTP API (a process boundary).
func TestServerErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status      int
		unavailable bool
	}{
		{http.StatusInternalServerError, true}, // e.g. "No cluster leader"
		{http.StatusServiceUnavailable, true},
		{http.StatusTooManyRequests, true},
		{http.StatusForbidden, false}, // ACL: a configuration error, not an outage
		{http.StatusBadRequest, false},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "nope", tc.status)
			}))
			defer srv.Close()
			r, err := consul.New(consul.Config{Addr: srv.Listener.Addr().String(), Token: "tok"})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			_, err = r.Lookup(context.Background(), "iss", "u")
			if err == nil || errors.Is(err, registry.ErrUnavailable) != tc.unavailable {
				t.Fatalf("Lookup = %v, want unavailable=%v", err, tc.unavailable)
			}
			if strings.Contains(err.Error(), "tok") {
				t.Fatalf("error quotes the token: %v", err)
			}
		})
	}
	// A hung agent: the request times out as ErrUnavailable, not when the caller gives up.
	t.Run("hung", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits for the request timeout")
		}
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		r, err := consul.New(consul.Config{Addr: srv.Listener.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := r.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrUnavailable) {
			t.Fatalf("Lookup = %v, want ErrUnavailable", err)
		}
	})
}

func TestConfig(t *testing.T) {
	if _, err := consul.New(consul.Config{Prefix: "/abs/"}); err == nil {
		t.Fatal("a prefix starting with / was accepted")
	}
	if _, err := consul.New(consul.Config{SessionTTL: time.Millisecond}); err == nil {
		t.Fatal("a sub-second session TTL was accepted")
	}
	r, err := consul.New(consul.Config{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(context.Background(), registry.Entry{Issuer: "iss", User: "u", Alloc: "a/../b", Addr: "h:1"}); !errors.Is(err, consul.ErrBadEntry) {
		t.Fatalf("Register with a path in alloc = %v, want ErrBadEntry", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func benchmarkLookup(b *testing.B, watch bool) {
	srv := testenv.StartConsul(b)
	ctx := context.Background()
	prefix := uniquePrefix()
	writer := open(b, srv, prefix, nil)
	const users = 100
	for i := range users {
		if err := writer.Register(ctx, entry(fmt.Sprint("u", i), 1, fmt.Sprint("a", i))); err != nil {
			b.Fatal(err)
		}
	}
	r := open(b, srv, prefix, func(c *consul.Config) { c.Watch = watch })
	if watch {
		waitFor(b, "the watch to cache every user", func() bool {
			for i := range users {
				if _, ok := r.Cached("iss", fmt.Sprint("u", i)); !ok {
					return false
				}
			}
			return true
		})
	}
	names := make([]string, users)
	for i := range names {
		names[i] = fmt.Sprint("u", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := r.Lookup(ctx, "iss", names[i%users]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkLookupDirect reads the owner key from Consul on every Lookup.
func BenchmarkLookupDirect(b *testing.B) { benchmarkLookup(b, false) }

// BenchmarkLookupWatched serves Lookup from the watch cache.
func BenchmarkLookupWatched(b *testing.B) { benchmarkLookup(b, true) }
