package adminclient_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/wire"
)

// server is the real billing API over a SQLite ledger and a secrets file, recording the request ids it was
// sent.
type server struct {
	url, key string
	ledger   *sqlite.Ledger
	mu       sync.Mutex
	ids      []string // guarded by mu
}

func newServer(t *testing.T, webhookMaster []byte) *server {
	t.Helper()
	dir := t.TempDir()
	s := &server{}
	var err error
	if s.ledger, err = sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(dir, "ledger.db")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.ledger.Close() })
	store, err := file.Open(filepath.Join(dir, file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	if s.key, _, err = store.EnsureAdminKey(); err != nil {
		t.Fatal(err)
	}
	api, err := billing.NewAPI(billing.APIConfig{Store: s.ledger, Keys: store, AdminKeys: store.AdminKeys, WebhookMaster: webhookMaster})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.ids = append(s.ids, r.Header.Get("X-Request-Id"))
		s.mu.Unlock()
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *server) lastID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[len(s.ids)-1]
}

func newClient(t *testing.T, cfg adminclient.Config) *adminclient.Client {
	t.Helper()
	c, err := adminclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestContract drives every typed method against the real billing API.
func TestContract(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, adminclient.Config{URL: s.url + "/", Key: s.key})
	ctx := context.Background()

	if _, err := c.GetIssuer(ctx, "a/b"); !adminclient.IsCode(err, wire.NotFound) {
		t.Fatalf("GetIssuer of an unregistered issuer: %v", err)
	}
	if iss, err := c.PutIssuer(ctx, "a/b", "Slashed"); err != nil || iss.ID != "a/b" || iss.Name != "Slashed" {
		t.Fatalf("PutIssuer(a/b) = %+v, %v", iss, err)
	}
	if iss, err := c.GetIssuer(ctx, "a/b"); err != nil || iss.Name != "Slashed" || iss.Created.IsZero() {
		t.Fatalf("GetIssuer(a/b) = %+v, %v", iss, err)
	}
	key, err := c.RotateKey(ctx, "a/b")
	if err != nil || key.KeyID == "" || key.Secret == "" {
		t.Fatalf("RotateKey = %+v, %v", key, err)
	}

	k := billing.QuotaKey{Issuer: "a/b"}
	q := billing.Quota{AIMicros: 5_000_000, ComputeSeconds: 3600, Window: billing.Day, MaxConcurrentSessions: 2}
	q.MaxMemoryBytes = 1 << 30
	stored, err := c.PutQuota(ctx, k, q, 0)
	if err != nil || stored.Issuer != "a/b" || stored.Revision != 1 || stored.MaxMemoryBytes != 1<<30 {
		t.Fatalf("PutQuota = %+v, %v", stored, err)
	}
	if _, err := c.PutQuota(ctx, k, q, 0); !adminclient.IsCode(err, wire.Conflict) {
		t.Fatalf("PutQuota at a stale revision: %v", err)
	}
	user := billing.QuotaKey{Issuer: "a/b", User: "u/1"}
	if over, err := c.PutQuota(ctx, user, q, 0); err != nil || over.User != "u/1" {
		t.Fatalf("PutQuota of a user = %+v, %v", over, err)
	}
	if got, err := c.GetQuota(ctx, k); err != nil || got.Quota != stored.Quota {
		t.Fatalf("GetQuota = %+v, %v, want %+v", got, err, stored)
	}
	list, err := c.ListIssuers(ctx)
	if err != nil || len(list) != 1 || list[0].Quota == nil || *list[0].Quota != stored.Quota {
		t.Fatalf("ListIssuers = %+v, %v", list, err)
	}
	if err := c.DeleteQuota(ctx, user, 7); !adminclient.IsCode(err, wire.Conflict) {
		t.Fatalf("DeleteQuota at a wrong revision: %v", err)
	}
	if err := c.DeleteQuota(ctx, user, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetQuota(ctx, user); !adminclient.IsCode(err, wire.NotFound) {
		t.Fatalf("GetQuota after DeleteQuota: %v", err)
	}

	table, err := c.ListPrices(ctx)
	if err != nil || len(table.Models) == 0 || table.Default == (billing.Price{}) {
		t.Fatalf("ListPrices = %+v, %v", table, err)
	}
	p := billing.Price{Input: 1, Output: 2, CacheRead: 3, CacheCreation: 4}
	if mp, err := c.PutPrice(ctx, "acme/model", p); err != nil || mp.Price != p || !mp.Custom {
		t.Fatalf("PutPrice = %+v, %v", mp, err)
	}
	if mp, err := c.GetPrice(ctx, "acme/model-x"); err != nil || mp.Matched != "acme/model" || mp.Price != p {
		t.Fatalf("GetPrice of a longer name = %+v, %v", mp, err)
	}
	if err := c.DeletePrice(ctx, "acme/model"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePrice(ctx, "acme/model"); !adminclient.IsCode(err, wire.NotFound) {
		t.Fatalf("DeletePrice of no override: %v", err)
	}
	// No -webhook-secret-file: the route is unavailable.
	if _, err := c.WebhookSecret(ctx, "a/b"); !adminclient.IsCode(err, wire.Unavailable) {
		t.Fatalf("WebhookSecret without a master: %v", err)
	}
}

func TestWebhookSecret(t *testing.T) {
	s := newServer(t, bytes.Repeat([]byte{7}, 32))
	c := newClient(t, adminclient.Config{URL: s.url, Key: s.key})
	if _, err := c.PutIssuer(context.Background(), "acme", ""); err != nil {
		t.Fatal(err)
	}
	got, err := c.WebhookSecret(context.Background(), "acme")
	if err != nil || got.Issuer != "acme" || got.Secret != wire.WebhookSecret(bytes.Repeat([]byte{7}, 32), "acme") {
		t.Fatalf("WebhookSecret = %+v, %v", got, err)
	}
}

// TestUsage: pages are collected into one report; a report over maxRows is an error, never cut short.
func TestUsage(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, adminclient.Config{URL: s.url, Key: s.key})
	ctx := context.Background()
	day := time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)
	const users = 3
	for i := range users {
		ev := billing.UsageEvent{Key: string(rune('a' + i)), Kind: billing.KindAI, Model: "opus", AIMicros: 10, At: day,
			Account: billing.Account{Issuer: "acme", User: string(rune('a' + i)), Window: billing.Lifetime}}
		if err := s.ledger.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	q := adminclient.UsageQuery{From: "2030-03-01", To: "2030-04-01", GroupBy: billing.GroupByUser}
	r, err := c.Usage(ctx, q, 0)
	if err != nil || len(r.Rows) != users || r.Totals.AIMicros != 30 || r.NextCursor != "" || adminclient.UsageKey(r.Rows[2]) != "c" {
		t.Fatalf("Usage = %+v, %v", r, err)
	}
	// maxRows 2: pages of two rows, and a third row is over the bound.
	if _, err := c.Usage(ctx, q, 2); !errors.Is(err, adminclient.ErrTooManyRows) {
		t.Fatalf("Usage over maxRows: %v", err)
	}
	if r, err := c.Usage(ctx, q, users); err != nil || len(r.Rows) != users {
		t.Fatalf("Usage at maxRows: %+v, %v", r, err)
	}
	var csv strings.Builder
	if err := c.UsageCSV(ctx, q, &csv); err != nil || strings.Count(csv.String(), "\n") != users+1 {
		t.Fatalf("UsageCSV = %q, %v", csv.String(), err)
	}
	bad := q
	bad.GroupBy = "week"
	if _, err := c.Usage(ctx, bad, 0); !adminclient.IsCode(err, wire.InvalidArgument) {
		t.Fatalf("Usage by week: %v", err)
	}
	if err := c.UsageCSV(ctx, bad, &csv); !adminclient.IsCode(err, wire.InvalidArgument) {
		t.Fatalf("UsageCSV by week: %v", err)
	}
}

// TestErrors: an error names the request and the id the server logged it under; a wrong key keeps its code.
func TestErrors(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, adminclient.Config{URL: s.url, Key: s.key})
	_, err := c.GetIssuer(context.Background(), "ghost")
	var e *adminclient.Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Method != "GET" || e.Path != "/v1/issuers/ghost" {
		t.Fatalf("GetIssuer(ghost) = %#v", err)
	}
	if id := s.lastID(); id == "" || e.RequestID != id || !strings.Contains(err.Error(), "request id "+id) {
		t.Fatalf("error %q, request id %q; the server was sent %q", err, e.RequestID, id)
	}
	wrong := newClient(t, adminclient.Config{URL: s.url, Key: "wak_wrong"})
	if _, err := wrong.ListIssuers(context.Background()); !adminclient.IsCode(err, wire.Unauthenticated) {
		t.Fatalf("a wrong key: %v", err)
	}
	for _, cfg := range []adminclient.Config{{URL: "ftp://x", Key: "k"}, {URL: "http://", Key: "k"}, {URL: "http://x?a=b", Key: "k"},
		{URL: "http://x#f", Key: "k"}} {
		if _, err := adminclient.New(cfg); !errors.Is(err, adminclient.ErrBadURL) {
			t.Errorf("New(%q) = %v, want ErrBadURL", cfg.URL, err)
		}
	}
	if _, err := adminclient.New(adminclient.Config{URL: "http://x"}); !errors.Is(err, adminclient.ErrNoKey) {
		t.Errorf("New without a key = %v", err)
	}
}

// TestAnswerBound: an answer over MaxAnswerBytes is refused, not read on.
func TestAnswerBound(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, adminclient.Config{URL: s.url, Key: s.key, MaxAnswerBytes: 64})
	_, err := c.ListPrices(context.Background())
	var tooLarge *adminclient.AnswerTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Limit != 64 || !strings.Contains(err.Error(), "answer over 64 bytes") {
		t.Fatalf("a price table over 64 bytes: %v", err)
	}
	big := newClient(t, adminclient.Config{URL: s.url, Key: s.key})
	if _, err := big.ListPrices(context.Background()); err != nil {
		t.Fatalf("the default bound: %v", err)
	}
}

// TestTimeout: a server that never answers fails the call with *TimeoutError once the client's timeout
// passes, while the caller's context is still live.
func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	c := newClient(t, adminclient.Config{URL: srv.URL, Key: "k", Timeout: 20 * time.Millisecond})
	for name, call := range map[string]func() error{
		"Call":   func() error { _, err := c.ListIssuers(context.Background()); return err },
		"Export": func() error { return c.UsageCSV(context.Background(), adminclient.UsageQuery{}, &strings.Builder{}) },
		"Upload": func() error {
			return c.Upload(context.Background(), http.MethodPut, "/x", "application/x-tar", strings.NewReader("tar"), nil)
		},
	} {
		err := call()
		var te *adminclient.TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 20ms") {
			t.Errorf("%s to a silent server: %v", name, err)
		}
	}
}

// TestAPIKeys drives the key methods against the real billing API: a key made by the admin works as the
// client's key for its own issuer, is refused for another's, and is refused once revoked.
func TestAPIKeys(t *testing.T) {
	s := newServer(t, nil)
	admin := newClient(t, adminclient.Config{URL: s.url, Key: s.key})
	ctx := context.Background()
	for _, iss := range []string{"acme", "beta"} {
		if _, err := admin.PutIssuer(ctx, iss, ""); err != nil {
			t.Fatal(err)
		}
	}
	k, err := admin.CreateAPIKey(ctx, "acme", "backend")
	if err != nil {
		t.Fatal(err)
	}
	list, err := admin.ListAPIKeys(ctx, "acme")
	if err != nil || len(list) != 1 || list[0] != k.APIKey {
		t.Fatalf("ListAPIKeys = %+v, %v; want %+v", list, err, k.APIKey)
	}
	scoped := newClient(t, adminclient.Config{URL: s.url, Key: k.Secret})
	if _, err := scoped.GetIssuer(ctx, "acme"); err != nil {
		t.Fatalf("the key on its own issuer: %v", err)
	}
	if _, err := scoped.GetQuota(ctx, billing.QuotaKey{Issuer: "beta"}); !adminclient.IsCode(err, wire.PermissionDenied) {
		t.Fatalf("the key on another issuer's quota: %v, want permission_denied", err)
	}
	if err := scoped.RevokeAPIKey(ctx, "acme", k.ID); !adminclient.IsCode(err, wire.PermissionDenied) {
		t.Fatalf("the key revoking itself: %v, want permission_denied (the admin's)", err)
	}
	if err := admin.RevokeAPIKey(ctx, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := scoped.GetIssuer(ctx, "acme"); !adminclient.IsCode(err, wire.Unauthenticated) {
		t.Fatalf("a revoked key: %v, want unauthenticated", err)
	}
	if err := admin.RevokeAPIKey(ctx, "acme", k.ID); !adminclient.IsCode(err, wire.NotFound) {
		t.Fatalf("revoking twice: %v, want not_found", err)
	}
}
