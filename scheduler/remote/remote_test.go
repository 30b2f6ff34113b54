package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/remote"
)

const key = "0123456789abcdef-test-key"

// recorder is a Scheduler that answers from a registry and records what it was asked.
type recorder struct {
	mu      sync.Mutex
	reg     registry.Registry
	ensured []scheduler.Request
	forgot  []registry.Entry
	err     error
}

func (r *recorder) Ensure(ctx context.Context, req scheduler.Request) (registry.Entry, error) {
	r.mu.Lock()
	r.ensured = append(r.ensured, req)
	err := r.err
	r.mu.Unlock()
	if err != nil {
		return registry.Entry{}, err
	}
	e := registry.Entry{Issuer: req.Issuer, User: req.User, Epoch: 3, Region: "r1", Alloc: "a-3", Addr: "127.0.0.1:9", Key: "runner-key", Since: time.Unix(1700000000, 0).UTC()}
	return e, r.reg.Register(ctx, e)
}

func (r *recorder) Forget(_ context.Context, e registry.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgot = append(r.forgot, e)
}

// Status answers running for a user the registry holds, else absent.
func (r *recorder) Status(ctx context.Context, issuer, user string, _ time.Time) (scheduler.Status, error) {
	e, err := r.reg.Lookup(ctx, issuer, user)
	if err != nil {
		return scheduler.Status{State: scheduler.StateAbsent}, nil
	}
	return scheduler.Status{State: scheduler.StateRunning, Region: e.Region, Epoch: e.Epoch, Since: e.Since}, nil
}

// cache is a mem registry with Invalidate, as the edge's watched Consul registry is.
type cache struct {
	registry.Registry
	invalidated []string
}

func (c *cache) Invalidate(issuer, user string) {
	c.invalidated = append(c.invalidated, issuer+"/"+user)
}

func TestEnsureAndForgetRoundTrip(t *testing.T) {
	rec := &recorder{reg: mem.New()}
	srv := httptest.NewServer(remote.Handler(rec, key, nil))
	defer srv.Close()
	c := &remote.Client{URL: srv.URL, Key: key}
	ctx := context.Background()
	acct := billing.Account{Issuer: "iss", User: "u", Window: billing.Window("day"), WindowStart: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}
	anchor := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	e, err := c.Ensure(ctx, scheduler.Request{Issuer: "iss", User: "u", Account: acct, ComputeLimit: 60, Anchor: anchor, Template: "py"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Epoch != 3 || e.Key != "runner-key" || e.Addr != "127.0.0.1:9" || !e.Since.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("entry = %+v", e)
	}
	if got := rec.ensured[0]; got.Account != acct || got.ComputeLimit != 60 || !got.Anchor.Equal(anchor) || got.Template != "py" {
		t.Fatalf("scheduler got %+v, want account %+v", got, acct)
	}
	c.Forget(ctx, e)
	if len(rec.forgot) != 1 || rec.forgot[0].Epoch != 3 || rec.forgot[0].Alloc != "a-3" {
		t.Fatalf("forgot = %+v", rec.forgot)
	}
}

func TestRegistryHitSkipsTheScheduler(t *testing.T) {
	rec := &recorder{reg: mem.New()}
	srv := httptest.NewServer(remote.Handler(rec, key, nil))
	defer srv.Close()
	reg := &cache{Registry: rec.reg}
	c := &remote.Client{URL: srv.URL, Key: key, Registry: reg}
	ctx := context.Background()
	req := scheduler.Request{Issuer: "iss", User: "u"}
	first, err := c.Ensure(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ensure(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.ensured); n != 1 {
		t.Fatalf("scheduler asked %d times, want 1 (second from the registry)", n)
	}
	c.Forget(ctx, first)
	if len(reg.invalidated) != 1 || reg.invalidated[0] != "iss/u" {
		t.Fatalf("invalidated = %v", reg.invalidated)
	}
}

func TestErrorsKeepTheirWireCode(t *testing.T) {
	rec := &recorder{reg: mem.New(), err: wire.Errorf(wire.Timeout, "the sandbox did not start in time")}
	srv := httptest.NewServer(remote.Handler(rec, key, nil))
	defer srv.Close()
	_, err := (&remote.Client{URL: srv.URL, Key: key}).Ensure(context.Background(), scheduler.Request{Issuer: "iss", User: "u"})
	if wire.CodeOf(err) != wire.Timeout {
		t.Fatalf("err = %v (code %s), want timeout", err, wire.CodeOf(err))
	}
	_, err = (&remote.Client{URL: srv.URL, Key: "wrong-key-wrong-key"}).Ensure(context.Background(), scheduler.Request{Issuer: "iss", User: "u"})
	if wire.CodeOf(err) != wire.Internal {
		t.Fatalf("wrong key: err = %v, want internal (the edge's credentials, not the user's)", err)
	}
	srv.Close()
	_, err = (&remote.Client{URL: srv.URL, Key: key}).Ensure(context.Background(), scheduler.Request{Issuer: "iss", User: "u"})
	if wire.CodeOf(err) != wire.Unavailable {
		t.Fatalf("closed scheduler: err = %v, want unavailable", err)
	}
}

// An owned user's refusal keeps its details across the API: the edge reads the serving region from
// details.region to forward the connection there (docs/PROTOCOL.md#errors).
func TestOwnedRefusalKeepsTheRegion(t *testing.T) {
	owned := &scheduler.OwnedError{Region: "a", Epoch: 4, Lease: time.Now().Add(time.Minute)}
	rec := &recorder{reg: mem.New(), err: wire.Wrap(wire.Unavailable, owned, "this user's sandbox is served in region a").
		WithDetails(map[string]any{"region": "a"})}
	srv := httptest.NewServer(remote.Handler(rec, key, nil))
	defer srv.Close()
	_, err := (&remote.Client{URL: srv.URL, Key: key}).Ensure(context.Background(), scheduler.Request{Issuer: "iss", User: "u"})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.Unavailable || we.Details["region"] != "a" {
		t.Fatalf("err = %#v, want unavailable with details.region a", err)
	}
}

func TestBadBodiesRefused(t *testing.T) {
	rec := &recorder{reg: mem.New()}
	srv := httptest.NewServer(remote.Handler(rec, key, nil))
	defer srv.Close()
	for _, body := range []string{``, `{}`, `{"issuer":"i"}`, `{"issuer":"i","user":"u","extra":1}`, `{"issuer":"i","user":"u","account":{"window":"fortnight"}}`, `{"issuer":"i","user":"u"} x`, `{"issuer":"i","user":"u","template":"../py"}`, `{"issuer":"i","user":"u","template":"Py"}`} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/sandboxes/ensure", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("body %q: status %d, want 400", body, resp.StatusCode)
		}
	}
	if len(rec.ensured) != 0 {
		t.Fatalf("bad bodies reached the scheduler: %+v", rec.ensured)
	}
}

// schedulerCall sends method path with the Authorization header auth to the scheduler API at base and
// returns the status and wire code ("" for a 2xx).
func schedulerCall(t *testing.T, base, method, path, auth, requestID string) (int, wire.Code, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(`{"issuer":"i","user":"u"}`))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return resp.StatusCode, "", resp.Header
	}
	var we wire.Error
	if err := json.NewDecoder(resp.Body).Decode(&we); err != nil || !we.Code.Valid() {
		t.Fatalf("%s %s: %d is not a wire error", method, path, resp.StatusCode)
	}
	return resp.StatusCode, we.Code, resp.Header
}

// The bearer rule of every role (docs/PROTOCOL.md#auth-header): the scheme in any case, the key exact.
func TestSchedulerBearerRule(t *testing.T) {
	srv := httptest.NewServer(remote.Handler(&recorder{reg: mem.New()}, key, nil))
	defer srv.Close()
	for _, auth := range []string{"Bearer " + key, "bearer " + key, "BEARER\t" + key + " "} {
		if status, code, _ := schedulerCall(t, srv.URL, "POST", "/v1/sandboxes/ensure", auth, ""); status != http.StatusOK {
			t.Errorf("%q: %d %s", auth, status, code)
		}
	}
	for _, auth := range []string{"", "Bearer " + key[1:], "Bearer " + key + "x", "Bearer " + strings.ToUpper(key), "Basic " + key, "Bearer" + key} {
		if status, code, _ := schedulerCall(t, srv.URL, "POST", "/v1/sandboxes/ensure", auth, ""); code != wire.Unauthenticated {
			t.Errorf("%q: %d %s", auth, status, code)
		}
	}
	// An empty configured key matches nothing, not even an empty one sent.
	empty := httptest.NewServer(remote.Handler(&recorder{reg: mem.New()}, "", nil))
	defer empty.Close()
	if _, code, _ := schedulerCall(t, empty.URL, "POST", "/v1/sandboxes/ensure", "Bearer ", ""); code != wire.Unauthenticated {
		t.Errorf("empty key: %s", code)
	}
}

// Unknown paths and methods are wire errors, and need the key (docs/PROTOCOL.md#errors); request ids
// follow the one rule (docs/PROTOCOL.md#request-id).
func TestSchedulerUnknownRoutesAndRequestIDs(t *testing.T) {
	srv := httptest.NewServer(remote.Handler(&recorder{reg: mem.New()}, key, nil))
	defer srv.Close()
	for _, c := range []struct {
		method, path, auth string
		code               wire.Code
	}{
		{"GET", "/", "", wire.Unauthenticated},
		{"GET", "/v1/nope", "", wire.Unauthenticated},
		{"GET", "/", "Bearer " + key, wire.NotFound},
		{"GET", "/nope", "Bearer " + key, wire.NotFound},
		{"GET", "/v1/nope", "Bearer " + key, wire.NotFound},
		{"GET", "/v1/sandboxes/ensure", "Bearer " + key, wire.InvalidArgument},
		{"DELETE", "/healthz", "Bearer " + key, wire.InvalidArgument},
	} {
		if status, code, h := schedulerCall(t, srv.URL, c.method, c.path, c.auth, ""); code != c.code || status != c.code.HTTPStatus() ||
			(c.code == wire.InvalidArgument && h.Get("Allow") == "") {
			t.Errorf("%s %s (%q): %d %s", c.method, c.path, c.auth, status, code)
		}
	}
	for sent, kept := range map[string]bool{"edge-1.2:3": true, strings.Repeat("a", 65): false, "a b": false} {
		_, _, h := schedulerCall(t, srv.URL, "POST", "/v1/sandboxes/ensure", "Bearer "+key, sent)
		if got := h.Get("X-Request-Id"); (got == sent) != kept || got == "" {
			t.Errorf("sent %q, echoed %q", sent, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"issuer":"i","user":"u","account":{"issuer":"i","user":"u","window":"day","windowStart":"2026-11-22T00:00:00Z"},"computeLimit":5}`,
		`{"issuer":"i","user":"u","epoch":2,"alloc":"a","addr":"h:1","key":"k","since":"2026-11-22T00:00:00Z"}`, `[]`, `{"epoch":-1}`, `{"issuer":"i","user":"u","template":"py"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := remote.ParseEnsure(b); err == nil {
			if r.Issuer == "" || r.User == "" || (r.Account.Window != "" && !r.Account.Window.Valid()) || (r.Template != "" && !token.ValidTemplate(r.Template)) {
				t.Fatalf("accepted invalid ensure %+v", r)
			}
		} else if !errors.As(err, new(*wire.Error)) {
			t.Fatalf("untyped error %v", err)
		}
		if r, err := remote.ParseStatus(b); err == nil {
			if r.Issuer == "" || r.User == "" || len(r.Issuer) > 256 || len(r.User) > 256 {
				t.Fatalf("accepted invalid status request %+v", r)
			}
		} else if !errors.As(err, new(*wire.Error)) {
			t.Fatalf("untyped error %v", err)
		}
		if e, err := remote.ParseEntry(b); err == nil {
			if e.Issuer == "" || e.User == "" || e.Epoch < 0 {
				t.Fatalf("accepted invalid entry %+v", e)
			}
		} else if !errors.As(err, new(*wire.Error)) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

// Status crosses the API: absent, then running with its region, epoch and start; bad bodies are typed.
func TestStatusRoundTrip(t *testing.T) {
	rec := &recorder{reg: mem.New()}
	srv := httptest.NewServer(remote.Handler(rec, key, nil))
	defer srv.Close()
	c := &remote.Client{URL: srv.URL, Key: key}
	ctx := context.Background()
	if st, err := c.Status(ctx, "iss", "u"); err != nil || st != (scheduler.Status{State: scheduler.StateAbsent}) {
		t.Fatalf("before: %+v, %v", st, err)
	}
	if _, err := c.Ensure(ctx, scheduler.Request{Issuer: "iss", User: "u"}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, "iss", "u")
	if err != nil || st.State != scheduler.StateRunning || st.Region != "r1" || st.Epoch != 3 || !st.Since.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("running: %+v, %v", st, err)
	}
	for _, args := range [][2]string{{"iss", ""}, {strings.Repeat("i", 257), "u"}} {
		if _, err := c.Status(ctx, args[0], args[1]); wire.CodeOf(err) != wire.InvalidArgument {
			t.Errorf("Status(%.10q, %q): %v, want invalid_argument", args[0], args[1], err)
		}
	}
	if _, err := remote.ParseStatus([]byte(`{"issuer":"iss","user":"u","x":1}`)); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("an unknown field: %v, want invalid_argument", err)
	}
	if code, _, _ := schedulerCall(t, srv.URL, "POST", "/v1/sandboxes/status", "Bearer wrong-key-0123456789", ""); code != http.StatusUnauthorized {
		t.Errorf("wrong key: %d, want 401", code)
	}
}
