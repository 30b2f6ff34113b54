// Package admintest is the contract suite for the billing API's storage ports (billing.AdminStore: issuers,
// quotas, prices and usage reports). Every adapter's tests call Run, so the embedded and production stores
// answer the billing API the same way.
package admintest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// Store is what the suite drives: the admin ports, and a ledger to record the usage it reports on.
type Store interface {
	billing.Ledger
	billing.AdminStore
}

// Run runs the contract suite. open returns a new, empty store for each subtest and arranges its closing
// with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) Store) {
	t.Helper()
	t.Run("Issuers", func(t *testing.T) { testIssuers(t, open(t)) })
	t.Run("InvalidNames", func(t *testing.T) { testInvalidNames(t, open(t)) })
	t.Run("QuotaRevisions", func(t *testing.T) { testQuotaRevisions(t, open(t)) })
	t.Run("QuotaNeedsIssuer", func(t *testing.T) { testQuotaNeedsIssuer(t, open(t)) })
	t.Run("InvalidQuota", func(t *testing.T) { testInvalidQuota(t, open(t)) })
	t.Run("QuotaAdmissionFields", func(t *testing.T) { testQuotaAdmissionFields(t, open(t)) })
	t.Run("QuotaSandboxLimits", func(t *testing.T) { testQuotaSandboxLimits(t, open(t)) })
	t.Run("ConcurrentQuotaWriters", func(t *testing.T) { testConcurrentQuotaWriters(t, open(t)) })
	t.Run("Prices", func(t *testing.T) { testPrices(t, open(t)) })
	t.Run("Deletes", func(t *testing.T) { testDeletes(t, open(t)) })
	t.Run("UsageGrouping", func(t *testing.T) { testUsageGrouping(t, open(t)) })
	t.Run("UsageFilters", func(t *testing.T) { testUsageFilters(t, open(t)) })
	t.Run("UsagePagination", func(t *testing.T) { testUsagePagination(t, open(t)) })
	t.Run("UsageInvalid", func(t *testing.T) { testUsageInvalid(t, open(t)) })
	t.Run("APIKeys", func(t *testing.T) { testAPIKeys(t, open(t)) })
	t.Run("IssuerDisabled", func(t *testing.T) { testIssuerDisabled(t, open(t)) })
}

func testIssuers(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.GetIssuer(ctx, "acme"); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("GetIssuer of an unregistered issuer: %v, want ErrNotFound", err)
	}
	if got, err := s.ListIssuers(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListIssuers of an empty store = %v, %v", got, err)
	}
	acme := MustPutIssuer(t, s, "acme", "Acme")
	if acme.ID != "acme" || acme.Name != "Acme" || acme.Created.IsZero() || acme.Quota != nil {
		t.Fatalf("PutIssuer = %+v", acme)
	}
	renamed := MustPutIssuer(t, s, "acme", "Acme Corp")
	if renamed.Name != "Acme Corp" || !renamed.Created.Equal(acme.Created) {
		t.Fatalf("renamed = %+v, want the new name and the first creation time %v", renamed, acme.Created)
	}
	MustPutIssuer(t, s, "beta", "")
	q := MustPutQuota(t, s, billing.QuotaKey{Issuer: "acme"}, Quota(5_000_000), 0)
	MustPutQuota(t, s, billing.QuotaKey{Issuer: "beta", User: "u"}, Quota(1), 0) // an override is no default

	got, err := s.GetIssuer(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got.Quota == nil || *got.Quota != q || got.Name != "Acme Corp" {
		t.Fatalf("GetIssuer = %+v (quota %+v), want the default quota %+v", got, got.Quota, q)
	}
	list, err := s.ListIssuers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "acme" || list[1].ID != "beta" {
		t.Fatalf("ListIssuers = %+v, want acme and beta in order", list)
	}
	if list[0].Quota == nil || *list[0].Quota != q || list[1].Quota != nil {
		t.Fatalf("ListIssuers quotas = %+v, %+v", list[0].Quota, list[1].Quota)
	}
}

func testInvalidNames(t *testing.T, s Store) {
	ctx := context.Background()
	MustPutIssuer(t, s, "acme", "")
	for _, bad := range []string{"", "a\nb", "bidi\u202e", "bad\xffutf8", string(make([]byte, billing.MaxNameLen+1))} {
		t.Run(fmt.Sprintf("%q", bad), func(t *testing.T) {
			checks := map[string]error{}
			_, checks["PutIssuer"] = s.PutIssuer(ctx, bad, "")
			if bad != "" {
				_, checks["PutIssuer name"] = s.PutIssuer(ctx, "acme", bad)
				_, checks["GetQuota user"] = s.GetQuota(ctx, billing.QuotaKey{Issuer: "acme", User: bad})
				_, checks["PutQuota user"] = s.PutQuota(ctx, billing.QuotaKey{Issuer: "acme", User: bad}, Quota(1), 0)
			}
			_, checks["GetIssuer"] = s.GetIssuer(ctx, bad)
			_, checks["GetQuota"] = s.GetQuota(ctx, billing.QuotaKey{Issuer: bad})
			_, checks["PutQuota"] = s.PutQuota(ctx, billing.QuotaKey{Issuer: bad}, Quota(1), 0)
			_, checks["GetPrice"] = s.GetPrice(ctx, bad)
			checks["PutPrice"] = s.PutPrice(ctx, bad, billing.Price{})
			checks["DeletePrice"] = s.DeletePrice(ctx, bad)
			checks["DeleteQuota"] = s.DeleteQuota(ctx, billing.QuotaKey{Issuer: bad}, 1)
			for op, err := range checks {
				if !errors.Is(err, billing.ErrInvalid) {
					t.Errorf("%s: %v, want ErrInvalid", op, err)
				}
			}
		})
	}
}

func testQuotaRevisions(t *testing.T, s Store) {
	ctx := context.Background()
	MustPutIssuer(t, s, "acme", "")
	issuer, user := billing.QuotaKey{Issuer: "acme"}, billing.QuotaKey{Issuer: "acme", User: "alice"}
	if _, err := s.GetQuota(ctx, issuer); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("GetQuota before any Put: %v, want ErrNotFound", err)
	}
	// Creating names revision 0: "I saw no quota".
	if _, err := s.PutQuota(ctx, issuer, Quota(1), 1); !errors.Is(err, billing.ErrConflict) {
		t.Fatalf("PutQuota of a missing quota with revision 1: %v, want ErrConflict", err)
	}
	want := Quota(10)
	want.Revision = 99 // ignored: the store numbers revisions
	q1 := MustPutQuota(t, s, issuer, want, 0)
	if q1.Revision != 1 || q1.AIMicros != 10 {
		t.Fatalf("first PutQuota = %+v, want revision 1", q1)
	}
	if _, err := s.PutQuota(ctx, issuer, Quota(20), 0); !errors.Is(err, billing.ErrConflict) {
		t.Fatalf("PutQuota with stale revision 0: %v, want ErrConflict", err)
	}
	q2 := MustPutQuota(t, s, issuer, billing.Quota{AIMicros: billing.Unlimited, ComputeSeconds: 0, Window: billing.Lifetime,
		MaxConcurrentSessions: billing.Unlimited}, 1)
	if q2.Revision != 2 {
		t.Fatalf("second PutQuota revision %d, want 2", q2.Revision)
	}
	for _, stale := range []int64{1, 3} {
		if _, err := s.PutQuota(ctx, issuer, Quota(30), stale); !errors.Is(err, billing.ErrConflict) {
			t.Fatalf("PutQuota with revision %d at 2: %v, want ErrConflict", stale, err)
		}
	}
	if got := MustGetQuota(t, s, issuer); got != q2 {
		t.Fatalf("GetQuota = %+v, want %+v (failed writes change nothing)", got, q2)
	}
	// A user's override has revisions of its own.
	u1 := MustPutQuota(t, s, user, Quota(7), 0)
	if u1.Revision != 1 {
		t.Fatalf("user override revision %d, want 1", u1.Revision)
	}
	if got := MustGetQuota(t, s, user); got != u1 {
		t.Fatalf("GetQuota user = %+v, want %+v", got, u1)
	}
	if got := MustGetQuota(t, s, issuer); got != q2 {
		t.Fatalf("issuer quota changed by the user's: %+v", got)
	}
	if _, err := s.GetQuota(ctx, billing.QuotaKey{Issuer: "acme", User: "bob"}); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("GetQuota of a user without override: %v, want ErrNotFound", err)
	}

	iss, usr, err := billing.UserQuotas(ctx, s, "acme", "alice")
	if err != nil || iss == nil || *iss != q2 || usr == nil || *usr != u1 {
		t.Fatalf("UserQuotas(alice) = %+v, %+v, %v", iss, usr, err)
	}
	iss, usr, err = billing.UserQuotas(ctx, s, "acme", "bob")
	if err != nil || iss == nil || usr != nil {
		t.Fatalf("UserQuotas(bob) = %+v, %+v, %v; want the issuer's alone", iss, usr, err)
	}
}

func testQuotaNeedsIssuer(t *testing.T, s Store) {
	ctx := context.Background()
	for _, k := range []billing.QuotaKey{{Issuer: "ghost"}, {Issuer: "ghost", User: "u"}} {
		if _, err := s.PutQuota(ctx, k, Quota(1), 0); !errors.Is(err, billing.ErrNotFound) {
			t.Errorf("PutQuota %+v of an unregistered issuer: %v, want ErrNotFound", k, err)
		}
	}
}

func testInvalidQuota(t *testing.T, s Store) {
	ctx := context.Background()
	MustPutIssuer(t, s, "acme", "")
	k := billing.QuotaKey{Issuer: "acme"}
	for name, q := range map[string]billing.Quota{
		"no window":       {AIMicros: 1, Window: ""},
		"unknown window":  {AIMicros: 1, Window: "year"},
		"ai below -1":     {AIMicros: -2, Window: billing.Day},
		"compute below":   {ComputeSeconds: -2, Window: billing.Day},
		"sessions below":  {MaxConcurrentSessions: -5, Window: billing.Day},
		"issuer sessions": {MaxIssuerSessions: -2, Window: billing.Day},
		"connects below":  {ConnectsPerMinute: -2, Window: billing.Day},
		"issuer connects": {IssuerConnectsPerMinute: -3, Window: billing.Day},
		"prompts below":   {PromptsPerMinute: -9, Window: billing.Day},
		"issuer prompts":  {IssuerPromptsPerMinute: -4, Window: billing.Day},
		"processes below": {SandboxQuota: billing.SandboxQuota{MaxProcesses: -2}, Window: billing.Day},
		"memory too low":  {SandboxQuota: billing.SandboxQuota{MaxMemoryBytes: billing.MinSandboxMemoryBytes - 1}, Window: billing.Day},
		"cpu too low":     {SandboxQuota: billing.SandboxQuota{CPUMillis: 1}, Window: billing.Day},
		"stored below":    {SandboxQuota: billing.SandboxQuota{MaxStoredBytes: -3}, Window: billing.Day},
		"bg procs below":  {SandboxQuota: billing.SandboxQuota{MaxBackgroundProcesses: -2}, Window: billing.Day},
		"log unlimited":   {SandboxQuota: billing.SandboxQuota{MaxProcessLogBytes: -1}, Window: billing.Day},
		"log too low":     {SandboxQuota: billing.SandboxQuota{MaxProcessLogBytes: billing.MinSandboxProcessLogBytes - 1}, Window: billing.Day},
		"log too high":    {SandboxQuota: billing.SandboxQuota{MaxProcessLogBytes: billing.MaxSandboxProcessLogBytes + 1}, Window: billing.Day},
		"watches below":   {SandboxQuota: billing.SandboxQuota{MaxFileWatches: -2}, Window: billing.Day},
		"terminals below": {SandboxQuota: billing.SandboxQuota{MaxTerminals: -2}, Window: billing.Day},
		"tasks below":     {SandboxQuota: billing.SandboxQuota{MaxTasks: -2}, Window: billing.Day},
		"previews below":  {SandboxQuota: billing.SandboxQuota{MaxPreviewURLs: -2}, Window: billing.Day},
		"negative expect": Quota(1),
	} {
		expected := int64(0)
		if name == "negative expect" {
			expected = -1
		}
		if _, err := s.PutQuota(ctx, k, q, expected); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.GetQuota(ctx, k); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("an invalid quota was stored: %v", err)
	}
}

// The admission fields round-trip through PutQuota, GetQuota, GetIssuer and ListIssuers; a quota written
// without them reads them as 0 (not set); a user's override may set the per-user rates but not the
// issuer-wide fields, and a refused write changes nothing.
func testQuotaAdmissionFields(t *testing.T, s Store) {
	ctx := context.Background()
	MustPutIssuer(t, s, "acme", "")
	issuer, user := billing.QuotaKey{Issuer: "acme"}, billing.QuotaKey{Issuer: "acme", User: "alice"}

	plain := MustPutQuota(t, s, issuer, Quota(5), 0)
	if plain.MaxIssuerSessions != 0 || plain.ConnectsPerMinute != 0 || plain.IssuerConnectsPerMinute != 0 || plain.PromptsPerMinute != 0 ||
		plain.IssuerPromptsPerMinute != 0 {
		t.Fatalf("a quota without admission fields: %+v, want them 0", plain)
	}
	full := Quota(5)
	full.MaxIssuerSessions, full.ConnectsPerMinute, full.IssuerConnectsPerMinute, full.PromptsPerMinute = 10, -1, 600, 7
	full.IssuerPromptsPerMinute = 300
	q := MustPutQuota(t, s, issuer, full, 1)
	mustReadDefault(t, s, "acme", q)
	// Back to not set.
	unset := MustPutQuota(t, s, issuer, Quota(5), q.Revision)
	if got := MustGetQuota(t, s, issuer); got != unset {
		t.Fatalf("GetQuota after unsetting = %+v, want %+v", got, unset)
	}

	override := Quota(1)
	override.ConnectsPerMinute, override.PromptsPerMinute = 2, -1
	u := MustPutQuota(t, s, user, override, 0)
	if got := MustGetQuota(t, s, user); got != u {
		t.Fatalf("GetQuota override = %+v, want %+v", got, u)
	}
	for name, mod := range map[string]func(q *billing.Quota){
		"max issuer sessions":        func(q *billing.Quota) { q.MaxIssuerSessions = 1 },
		"unlimited issuer sessions":  func(q *billing.Quota) { q.MaxIssuerSessions = billing.Unlimited },
		"issuer connects per minute": func(q *billing.Quota) { q.IssuerConnectsPerMinute = 5 },
		"issuer prompts per minute":  func(q *billing.Quota) { q.IssuerPromptsPerMinute = 5 },
		"unlimited issuer prompts":   func(q *billing.Quota) { q.IssuerPromptsPerMinute = billing.Unlimited },
	} {
		bad := override
		mod(&bad)
		if _, err := s.PutQuota(ctx, user, bad, u.Revision); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("%s on a user's override: %v, want ErrInvalid", name, err)
		}
	}
	if got := MustGetQuota(t, s, user); got != u {
		t.Fatalf("refused writes changed the override: %+v, want %+v", got, u)
	}
}

// The sandbox limits round-trip through PutQuota, GetQuota, GetIssuer and ListIssuers, on the issuer's
// default and on a user's override; a quota written without them reads them as 0 (not set); one below its
// minimum is refused and changes nothing.
func testQuotaSandboxLimits(t *testing.T, s Store) {
	ctx := context.Background()
	MustPutIssuer(t, s, "acme", "")
	issuer, user := billing.QuotaKey{Issuer: "acme"}, billing.QuotaKey{Issuer: "acme", User: "alice"}

	if plain := MustPutQuota(t, s, issuer, Quota(5), 0); plain.SandboxQuota != (billing.SandboxQuota{}) {
		t.Fatalf("a quota without sandbox limits: %+v, want them 0", plain)
	}
	full := Quota(5)
	full.SandboxQuota = billing.SandboxQuota{MaxProcesses: 128, MaxMemoryBytes: 2 << 30, CPUMillis: 1500,
		MaxTmpBytes: 256 << 20, MaxWorkspaceBytes: -1, MaxConcurrentExecs: 3, MaxStoredBytes: 10 << 30,
		MaxBackgroundProcesses: 2, MaxProcessLogBytes: 64 << 10, MaxFileWatches: -1, MaxTerminals: 3, MaxTasks: 5,
		MaxPreviewURLs: 7}
	q := MustPutQuota(t, s, issuer, full, 1)
	if q.SandboxQuota != full.SandboxQuota {
		t.Fatalf("PutQuota = %+v, want the sandbox limits %+v", q, full.SandboxQuota)
	}
	mustReadDefault(t, s, "acme", q)

	override := Quota(1)
	override.MaxMemoryBytes, override.CPUMillis = billing.MinSandboxMemoryBytes, -1
	override.MaxTerminals, override.MaxPreviewURLs, override.MaxProcessLogBytes = 1, -1, billing.MaxSandboxProcessLogBytes
	u := MustPutQuota(t, s, user, override, 0)
	if got := MustGetQuota(t, s, user); got != u || got.MaxMemoryBytes != billing.MinSandboxMemoryBytes || got.CPUMillis != -1 ||
		got.MaxTerminals != 1 || got.MaxPreviewURLs != -1 || got.MaxProcessLogBytes != billing.MaxSandboxProcessLogBytes {
		t.Fatalf("GetQuota override = %+v, want %+v", got, u)
	}
	bad := override
	bad.MaxProcesses = billing.MinSandboxProcesses - 1
	if _, err := s.PutQuota(ctx, user, bad, u.Revision); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("processes below the minimum on an override: %v, want ErrInvalid", err)
	}
	bad = override
	bad.MaxProcessLogBytes = billing.Unlimited
	if _, err := s.PutQuota(ctx, user, bad, u.Revision); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("unlimited process log bytes on an override: %v, want ErrInvalid", err)
	}
	if got := MustGetQuota(t, s, user); got != u {
		t.Fatalf("a refused write changed the override: %+v, want %+v", got, u)
	}
	// Back to not set.
	unset := MustPutQuota(t, s, issuer, Quota(5), q.Revision)
	if got := MustGetQuota(t, s, issuer); got != unset || got.SandboxQuota != (billing.SandboxQuota{}) {
		t.Fatalf("GetQuota after unsetting = %+v, want %+v", got, unset)
	}
}

// mustReadDefault checks that GetQuota, GetIssuer and ListIssuers (where iss is the only issuer) all answer
// q as iss's default quota.
func mustReadDefault(t *testing.T, s Store, iss string, q billing.Quota) {
	t.Helper()
	ctx := context.Background()
	if got := MustGetQuota(t, s, billing.QuotaKey{Issuer: iss}); got != q {
		t.Fatalf("GetQuota = %+v, want %+v", got, q)
	}
	if got, err := s.GetIssuer(ctx, iss); err != nil || got.Quota == nil || *got.Quota != q {
		t.Fatalf("GetIssuer default quota = %+v, %v; want %+v", got.Quota, err, q)
	}
	if list, err := s.ListIssuers(ctx); err != nil || len(list) != 1 || list[0].Quota == nil || *list[0].Quota != q {
		t.Fatalf("ListIssuers = %+v, %v; want the default quota %+v", list, err, q)
	}
}

func testConcurrentQuotaWriters(t *testing.T, s Store) { QuotaRace(t, s) }

// SandboxLimitsMigrated checks a store migrated from a schema without the sandbox limits, in which two
// quotas were written: acme's default (5, 60, day, 3 sessions, revision 2, issuer sessions 10, connects
// 30, issuer connects 600, prompts 7, issuer prompts 70) and alice's override (-1, -1, lifetime,
// 1 session, revision 1). Both read as written, with the sandbox limits 0 (not set), and both take
// sandbox limits afterwards.
func SandboxLimitsMigrated(t *testing.T, l Store) {
	t.Helper()
	ctx := context.Background()
	issuer, user := billing.QuotaKey{Issuer: "acme"}, billing.QuotaKey{Issuer: "acme", User: "alice"}
	want := billing.Quota{AIMicros: 5, ComputeSeconds: 60, Window: billing.Day, MaxConcurrentSessions: 3, Revision: 2,
		MaxIssuerSessions: 10, ConnectsPerMinute: 30, IssuerConnectsPerMinute: 600, PromptsPerMinute: 7, IssuerPromptsPerMinute: 70}
	if got := MustGetQuota(t, l, issuer); got != want {
		t.Fatalf("quota after the migration = %+v, want %+v", got, want)
	}
	if iss, err := l.GetIssuer(ctx, "acme"); err != nil || iss.Quota == nil || *iss.Quota != want {
		t.Fatalf("GetIssuer after the migration = %+v, %v", iss.Quota, err)
	}
	want.MaxMemoryBytes, want.MaxProcesses, want.MaxStoredBytes = 1<<30, 256, -1
	want.MaxBackgroundProcesses, want.MaxTasks, want.MaxPreviewURLs = 1, -1, 3
	if got := MustPutQuota(t, l, issuer, want, 2); got.SandboxQuota != want.SandboxQuota {
		t.Fatalf("quota written after the migration = %+v", got)
	}
	wantUser := billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 1, Revision: 1}
	if got := MustGetQuota(t, l, user); got != wantUser {
		t.Fatalf("user quota after the migration = %+v, want %+v", got, wantUser)
	}
	wantUser.CPUMillis = 500
	if got := MustPutQuota(t, l, user, wantUser, 1); got.CPUMillis != 500 {
		t.Fatalf("override written after the migration = %+v", got)
	}
}

// QuotaRace races writers of one quota that all name the same revision, spread over stores (one per
// process sharing a database, or a single store for the goroutines of one process), round after round:
// first creating the quota (revision 0), then replacing it. In every round exactly one writer wins, the
// others see ErrConflict, and the quota reads back as the winner wrote it, whichever store reads it. The
// issuer "acme" is registered through the first store.
func QuotaRace(t *testing.T, stores ...billing.AdminStore) {
	t.Helper()
	ctx := context.Background()
	MustPutIssuer(t, stores[0], "acme", "")
	k := billing.QuotaKey{Issuer: "acme", User: "u"}
	const (
		rounds  = 3
		writers = 8
	)
	for round := range int64(rounds) {
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			start  = make(chan struct{})
			won    []billing.Quota
			lost   int
			failed bool
		)
		for i := range writers {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-start // all at once, as far as the scheduler lets them
				got, err := s.PutQuota(ctx, k, Quota(100*round+int64(i)), round)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won = append(won, got)
				case errors.Is(err, billing.ErrConflict):
					lost++
				default:
					failed = true
					t.Errorf("round %d: PutQuota: %v", round, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if failed {
			t.FailNow()
		}
		if len(won) != 1 || lost != writers-1 {
			t.Fatalf("round %d (revision %d): %d writers won (%+v) and %d lost, want 1 and %d", round, round, len(won), won, lost, writers-1)
		}
		if won[0].Revision != round+1 {
			t.Fatalf("round %d: the winner's revision %d, want %d", round, won[0].Revision, round+1)
		}
		for i, s := range stores {
			if got := MustGetQuota(t, s, k); got != won[0] {
				t.Fatalf("round %d: store %d reads %+v, want the winner's %+v", round, i, got, won[0])
			}
		}
	}
}

func testPrices(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.GetPrice(ctx, "m1"); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("GetPrice without override: %v, want ErrNotFound", err)
	}
	if got, err := s.ListPrices(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListPrices of an empty store = %v, %v", got, err)
	}
	p := billing.Price{Input: 1, Output: 2, CacheRead: 3, CacheCreation: 4}
	for _, m := range []string{"m1", "claude-sonnet"} {
		if err := s.PutPrice(ctx, m, p); err != nil {
			t.Fatal(err)
		}
	}
	p2 := billing.Price{Input: 10, Output: 20}
	if err := s.PutPrice(ctx, "m1", p2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetPrice(ctx, "m1"); err != nil || got != p2 {
		t.Fatalf("GetPrice = %+v, %v; want the replacement %+v", got, err, p2)
	}
	if _, err := s.GetPrice(ctx, "m"); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("GetPrice of a prefix: %v, want ErrNotFound (overrides are exact)", err)
	}
	got, err := s.ListPrices(ctx)
	if err != nil || !reflect.DeepEqual(got, map[string]billing.Price{"m1": p2, "claude-sonnet": p}) {
		t.Fatalf("ListPrices = %v, %v", got, err)
	}
	for _, bad := range []billing.Price{{Input: -1}, {Output: -1}, {CacheRead: -1}, {CacheCreation: billing.MaxPrice + 1}} {
		if err := s.PutPrice(ctx, "m1", bad); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("PutPrice %+v: %v, want ErrInvalid", bad, err)
		}
	}
	eff, err := billing.EffectivePrices(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if eff.Lookup("claude-sonnet-4-5") != p || eff.Lookup("m1-x") != p2 || eff.Lookup("claude-opus-4-5") != billing.DefaultPrices().Lookup("claude-opus-4-5") {
		t.Fatalf("EffectivePrices does not put the overrides on the defaults: %+v", eff.Models)
	}
}

// testDeletes: a quota is deleted only at its current revision, a user's override then gives way to the
// issuer's default; a price override is deleted once; what is not there is ErrNotFound.
func testDeletes(t *testing.T, s Store) {
	ctx := context.Background()
	MustPutIssuer(t, s, "acme", "")
	def := billing.QuotaKey{Issuer: "acme"}
	alice := billing.QuotaKey{Issuer: "acme", User: "alice"}
	MustPutQuota(t, s, def, Quota(5), 0)
	MustPutQuota(t, s, alice, Quota(1), 0)
	MustPutQuota(t, s, alice, Quota(2), 1)
	if err := s.DeleteQuota(ctx, alice, 1); !errors.Is(err, billing.ErrConflict) {
		t.Fatalf("DeleteQuota at a stale revision: %v, want ErrConflict", err)
	}
	if got := MustGetQuota(t, s, alice); got.Revision != 2 {
		t.Fatalf("a refused delete changed the quota: %+v", got)
	}
	if err := s.DeleteQuota(ctx, alice, 2); err != nil {
		t.Fatalf("DeleteQuota at the current revision: %v", err)
	}
	if _, err := s.GetQuota(ctx, alice); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("GetQuota after the delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteQuota(ctx, alice, 2); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("DeleteQuota of a deleted quota: %v, want ErrNotFound", err)
	}
	if got := MustGetQuota(t, s, def); got.Revision != 1 {
		t.Fatalf("deleting alice's override touched the issuer's default: %+v", got)
	}
	if q := MustPutQuota(t, s, alice, Quota(3), 0); q.Revision != 1 {
		t.Fatalf("a quota written again after its delete has revision %d, want 1", q.Revision)
	}
	if err := s.DeleteQuota(ctx, def, 1); err != nil {
		t.Fatal(err)
	}
	if iss, err := s.GetIssuer(ctx, "acme"); err != nil || iss.Quota != nil {
		t.Fatalf("GetIssuer after its default's delete = %+v, %v; want no default quota", iss, err)
	}

	p := billing.Price{Input: 1, Output: 2}
	if err := s.PutPrice(ctx, "m1", p); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPrice(ctx, "m2", p); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePrice(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePrice(ctx, "m1"); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("DeletePrice of a deleted override: %v, want ErrNotFound", err)
	}
	if got, err := s.ListPrices(ctx); err != nil || !reflect.DeepEqual(got, map[string]billing.Price{"m2": p}) {
		t.Fatalf("ListPrices after the delete = %v, %v", got, err)
	}
}

// Day0 is the first day of the suite's usage events.
var Day0 = time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)

// recordUsage records the suite's usage: two issuers, three users, two models and compute time, over two
// days (the last event a nanosecond before the second day's end).
func recordUsage(t *testing.T, s Store) {
	t.Helper()
	acct := func(iss, sub string) billing.Account {
		return billing.Account{Issuer: iss, User: sub, Window: billing.Month, WindowStart: Day0.AddDate(0, 0, -3)}
	}
	day1 := Day0.AddDate(0, 0, 1)
	for _, ev := range []billing.UsageEvent{
		{Key: "1", Account: acct("acme", "alice"), Kind: billing.KindAI, Model: "opus", AIMicros: 100, At: Day0},
		{Key: "2", Account: acct("acme", "alice"), Kind: billing.KindAI, Model: "sonnet", AIMicros: 10, At: Day0.Add(time.Hour)},
		{Key: "3", Account: acct("acme", "alice"), Kind: billing.KindCompute, ComputeSeconds: 60, At: day1},
		{Key: "4", Account: acct("acme", "bob"), Kind: billing.KindAI, Model: "opus", AIMicros: 1000, At: day1.Add(time.Hour)},
		{Key: "5", Account: acct("acme", "bob"), Kind: billing.KindCompute, ComputeSeconds: 5, At: day1.Add(24*time.Hour - 1)},
		{Key: "6", Account: acct("beta", "alice"), Kind: billing.KindAI, Model: "sonnet", AIMicros: 7, At: Day0.Add(2 * time.Hour)},
		// Outside [Day0, Day0+2d): before and at the end.
		{Key: "early", Account: acct("acme", "alice"), Kind: billing.KindAI, Model: "opus", AIMicros: 1 << 20, At: Day0.Add(-1)},
		{Key: "late", Account: acct("acme", "alice"), Kind: billing.KindAI, Model: "opus", AIMicros: 1 << 21, At: Day0.AddDate(0, 0, 2)},
	} {
		if err := s.Record(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

// Range is the filter over the suite's two days of usage, grouped by g.
func Range(g billing.GroupBy) billing.UsageFilter {
	return billing.UsageFilter{From: Day0, To: Day0.AddDate(0, 0, 2), GroupBy: g, Limit: billing.MaxUsageLimit}
}

func row(iss, key string, ai, compute, events int64) billing.UsageRow {
	return billing.UsageRow{Issuer: iss, Key: key, AIMicros: ai, ComputeSeconds: compute, Events: events}
}

func testUsageGrouping(t *testing.T, s Store) {
	recordUsage(t, s)
	totals := billing.UsageTotals{AIMicros: 1117, ComputeSeconds: 65, Events: 6}
	for _, tc := range []struct {
		g    billing.GroupBy
		rows []billing.UsageRow
	}{
		{billing.GroupByUser, []billing.UsageRow{
			row("acme", "alice", 110, 60, 3), row("acme", "bob", 1000, 5, 2), row("beta", "alice", 7, 0, 1)}},
		{billing.GroupByDay, []billing.UsageRow{
			row("acme", "2030-03-04", 110, 0, 2), row("acme", "2030-03-05", 1000, 65, 3), row("beta", "2030-03-04", 7, 0, 1)}},
		{billing.GroupByModel, []billing.UsageRow{
			row("acme", "", 0, 65, 2), row("acme", "opus", 1100, 0, 2), row("acme", "sonnet", 10, 0, 1), row("beta", "sonnet", 7, 0, 1)}},
	} {
		t.Run(string(tc.g), func(t *testing.T) {
			page := MustQuery(t, s, Range(tc.g))
			if !reflect.DeepEqual(page.Rows, tc.rows) || page.Totals != totals || page.NextCursor != "" {
				t.Fatalf("QueryUsage by %s =\n%+v totals %+v next %q\nwant\n%+v totals %+v", tc.g, page.Rows, page.Totals, page.NextCursor, tc.rows, totals)
			}
		})
	}
}

func testUsageFilters(t *testing.T, s Store) {
	recordUsage(t, s)
	f := Range(billing.GroupByUser)
	f.Issuer = "acme"
	page := MustQuery(t, s, f)
	if want := []billing.UsageRow{row("acme", "alice", 110, 60, 3), row("acme", "bob", 1000, 5, 2)}; !reflect.DeepEqual(page.Rows, want) ||
		page.Totals != (billing.UsageTotals{AIMicros: 1110, ComputeSeconds: 65, Events: 5}) {
		t.Fatalf("iss=acme: %+v totals %+v", page.Rows, page.Totals)
	}
	f.User = "alice"
	f.GroupBy = billing.GroupByModel
	page = MustQuery(t, s, f)
	if want := []billing.UsageRow{row("acme", "", 0, 60, 1), row("acme", "opus", 100, 0, 1), row("acme", "sonnet", 10, 0, 1)}; !reflect.DeepEqual(page.Rows, want) {
		t.Fatalf("iss=acme sub=alice by model: %+v", page.Rows)
	}
	// [From, To) is half-open and exact to the nanosecond.
	f = Range(billing.GroupByDay)
	f.From, f.To = Day0.Add(-1), Day0.Add(time.Nanosecond)
	page = MustQuery(t, s, f)
	if want := []billing.UsageRow{row("acme", "2030-03-03", 1<<20, 0, 1), row("acme", "2030-03-04", 100, 0, 1)}; !reflect.DeepEqual(page.Rows, want) {
		t.Fatalf("one nanosecond each side of Day0: %+v", page.Rows)
	}
	f.Issuer = "nobody"
	page = MustQuery(t, s, f)
	if len(page.Rows) != 0 || page.Totals != (billing.UsageTotals{}) || page.NextCursor != "" {
		t.Fatalf("unknown issuer: %+v", page)
	}
}

// Walking pages of one row gives the same rows as one page, the same totals on every page, and stops.
func testUsagePagination(t *testing.T, s Store) {
	recordUsage(t, s)
	for _, g := range []billing.GroupBy{billing.GroupByUser, billing.GroupByDay, billing.GroupByModel} {
		t.Run(string(g), func(t *testing.T) {
			all := MustQuery(t, s, Range(g))
			f := Range(g)
			f.Limit = 1
			var walked []billing.UsageRow
			for i := 0; ; i++ {
				if i > len(all.Rows) {
					t.Fatalf("more than %d pages of one row", i)
				}
				page := MustQuery(t, s, f)
				if page.Totals != all.Totals {
					t.Fatalf("page %d totals %+v, want %+v", i, page.Totals, all.Totals)
				}
				walked = append(walked, page.Rows...)
				if page.NextCursor == "" {
					break
				}
				f.Cursor = page.NextCursor
			}
			if !reflect.DeepEqual(walked, all.Rows) {
				t.Fatalf("walked %+v, want %+v", walked, all.Rows)
			}
		})
	}
	// A cursor past the last group gives an empty last page that still has the totals.
	f := Range(billing.GroupByUser)
	f.Cursor = billing.CursorAfter(billing.GroupByUser, billing.UsageRow{Issuer: "zzz"})
	page := MustQuery(t, s, f)
	if len(page.Rows) != 0 || page.NextCursor != "" || page.Totals != MustQuery(t, s, Range(billing.GroupByUser)).Totals {
		t.Fatalf("page past the end: %+v", page)
	}
}

func testUsageInvalid(t *testing.T, s Store) {
	ctx := context.Background()
	userCursor := billing.CursorAfter(billing.GroupByUser, billing.UsageRow{Issuer: "acme", Key: "alice"})
	for name, mod := range map[string]func(*billing.UsageFilter){
		"no from":          func(f *billing.UsageFilter) { f.From = time.Time{} },
		"no to":            func(f *billing.UsageFilter) { f.To = time.Time{} },
		"empty range":      func(f *billing.UsageFilter) { f.To = f.From },
		"reversed":         func(f *billing.UsageFilter) { f.From, f.To = f.To, f.From },
		"user no issuer":   func(f *billing.UsageFilter) { f.User = "alice" },
		"bad issuer":       func(f *billing.UsageFilter) { f.Issuer = "a\x00" },
		"bad group":        func(f *billing.UsageFilter) { f.GroupBy = "week" },
		"zero limit":       func(f *billing.UsageFilter) { f.Limit = 0 },
		"huge limit":       func(f *billing.UsageFilter) { f.Limit = billing.MaxUsageLimit + 1 },
		"garbage cursor":   func(f *billing.UsageFilter) { f.Cursor = "!!" },
		"other grouping":   func(f *billing.UsageFilter) { f.GroupBy = billing.GroupByDay; f.Cursor = userCursor },
		"cursor not json":  func(f *billing.UsageFilter) { f.Cursor = "bm90IGpzb24" },
		"cursor no issuer": func(f *billing.UsageFilter) { f.Cursor = billing.CursorAfter(billing.GroupByUser, billing.UsageRow{}) },
	} {
		f := Range(billing.GroupByUser)
		mod(&f)
		if _, err := s.QueryUsage(ctx, f); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// Quota returns a valid daily quota of ai microdollars.
func Quota(ai int64) billing.Quota {
	return billing.Quota{AIMicros: ai, ComputeSeconds: 3600, Window: billing.Day, MaxConcurrentSessions: 2}
}

// MustPutIssuer registers an issuer or fails the test.
func MustPutIssuer(t testing.TB, s billing.Issuers, id, name string) billing.Issuer {
	t.Helper()
	iss, err := s.PutIssuer(context.Background(), id, name)
	if err != nil {
		t.Fatalf("PutIssuer(%q): %v", id, err)
	}
	return iss
}

// MustPutQuota writes a quota or fails the test.
func MustPutQuota(t testing.TB, s billing.Quotas, k billing.QuotaKey, q billing.Quota, expected int64) billing.Quota {
	t.Helper()
	got, err := s.PutQuota(context.Background(), k, q, expected)
	if err != nil {
		t.Fatalf("PutQuota(%+v, revision %d): %v", k, expected, err)
	}
	q.Revision = got.Revision
	if got != q {
		t.Fatalf("PutQuota returned %+v, want %+v", got, q)
	}
	return got
}

// MustGetQuota reads a quota or fails the test.
func MustGetQuota(t testing.TB, s billing.Quotas, k billing.QuotaKey) billing.Quota {
	t.Helper()
	q, err := s.GetQuota(context.Background(), k)
	if err != nil {
		t.Fatalf("GetQuota(%+v): %v", k, err)
	}
	return q
}

// MustQuery queries usage or fails the test.
func MustQuery(t testing.TB, s billing.UsageQuery, f billing.UsageFilter) billing.UsagePage {
	t.Helper()
	page, err := s.QueryUsage(context.Background(), f)
	if err != nil {
		t.Fatalf("QueryUsage(%+v): %v", f, err)
	}
	return page
}
