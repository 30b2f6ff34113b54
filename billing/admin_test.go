package billing_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
)

func TestEffectiveLimit(t *testing.T) {
	quota := func(ai, compute, sessions int64) *billing.Quota {
		return &billing.Quota{AIMicros: ai, ComputeSeconds: compute, Window: billing.Day, MaxConcurrentSessions: sessions, Revision: 1}
	}
	unlimited := billing.Budget{AIMicros: -1, ComputeSeconds: -1}
	for _, tc := range []struct {
		name         string
		token        billing.Budget
		issuer, user *billing.Quota
		want         billing.Limit
	}{
		{"no quota: the token alone", billing.Budget{AIMicros: 5, ComputeSeconds: 6}, nil, nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 5, ComputeSeconds: 6}, MaxConcurrentSessions: -1}},
		{"issuer quota below the token", billing.Budget{AIMicros: 500, ComputeSeconds: 600}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 100, ComputeSeconds: 60}, MaxConcurrentSessions: 3}},
		{"token below the issuer quota", billing.Budget{AIMicros: 50, ComputeSeconds: 6}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 50, ComputeSeconds: 6}, MaxConcurrentSessions: 3}},
		{"mixed per dimension", billing.Budget{AIMicros: 50, ComputeSeconds: 600}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 50, ComputeSeconds: 60}, MaxConcurrentSessions: 3}},
		{"user override replaces the issuer's, even when higher", billing.Budget{AIMicros: 1000, ComputeSeconds: 1000},
			quota(100, 60, 3), quota(700, 900, 5),
			billing.Limit{Budget: billing.Budget{AIMicros: 700, ComputeSeconds: 900}, MaxConcurrentSessions: 5}},
		{"user override without an issuer quota", billing.Budget{AIMicros: 1000, ComputeSeconds: 10}, nil, quota(700, 900, 1),
			billing.Limit{Budget: billing.Budget{AIMicros: 700, ComputeSeconds: 10}, MaxConcurrentSessions: 1}},
		{"unlimited token takes the quota", unlimited, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 100, ComputeSeconds: 60}, MaxConcurrentSessions: 3}},
		{"unlimited quota keeps the token", billing.Budget{AIMicros: 5, ComputeSeconds: 6}, quota(-1, -1, -1), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 5, ComputeSeconds: 6}, MaxConcurrentSessions: -1}},
		{"both unlimited stay unlimited", billing.Budget{AIMicros: -7, ComputeSeconds: -1}, quota(-1, -1, -1), nil,
			billing.Limit{Budget: unlimited, MaxConcurrentSessions: -1}},
		{"zero quota allows nothing", billing.Budget{AIMicros: 5, ComputeSeconds: 6}, quota(0, 0, 0), nil,
			billing.Limit{Budget: billing.Budget{}, MaxConcurrentSessions: 0}},
		{"zero token allows nothing", billing.Budget{}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{}, MaxConcurrentSessions: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Quotas that set none of the admission fields leave the issuer uncapped and the rates unlimited.
			tc.want.MaxIssuerSessions, tc.want.Rates = -1, billing.UnlimitedRates
			if got := billing.EffectiveLimit(tc.token, tc.issuer, tc.user); got != tc.want {
				t.Fatalf("EffectiveLimit = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The admission fields: 0 is not set and falls through (user override, issuer default, the edge's
// defaults), -1 is unlimited, issuer-wide fields come from the issuer's default alone.
func TestEffectiveLimitAdmission(t *testing.T) {
	defaults := billing.Rates{ConnectsPerUser: 120, ConnectsPerIssuer: 6000, PromptsPerUser: 60, PromptsPerIssuer: 3000}
	base := billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Day, MaxConcurrentSessions: 4, Revision: 1}
	with := func(f func(q *billing.Quota)) *billing.Quota {
		q := base
		f(&q)
		return &q
	}
	for _, tc := range []struct {
		name           string
		issuer, user   *billing.Quota
		issuerSessions int64
		rates          billing.Rates
	}{
		{"no quota: the defaults", nil, nil, -1, defaults},
		{"quotas without the fields: the defaults", &base, &base, -1, defaults},
		{"issuer sets all", with(func(q *billing.Quota) {
			q.MaxIssuerSessions, q.ConnectsPerMinute, q.IssuerConnectsPerMinute, q.PromptsPerMinute = 10, 3, 30, 2
			q.IssuerPromptsPerMinute = 20
		}), nil, 10, billing.Rates{ConnectsPerUser: 3, ConnectsPerIssuer: 30, PromptsPerUser: 2, PromptsPerIssuer: 20}},
		{"override's rates replace the issuer's, even higher; issuer-wide fields stay the issuer's",
			with(func(q *billing.Quota) {
				q.MaxIssuerSessions, q.ConnectsPerMinute, q.IssuerConnectsPerMinute, q.PromptsPerMinute = 10, 3, 30, 2
				q.IssuerPromptsPerMinute = 20
			}),
			with(func(q *billing.Quota) { q.ConnectsPerMinute, q.PromptsPerMinute = 500, -1 }),
			10, billing.Rates{ConnectsPerUser: 500, ConnectsPerIssuer: 30, PromptsPerUser: -1, PromptsPerIssuer: 20}},
		{"override unset falls back to the issuer's, then the defaults",
			with(func(q *billing.Quota) { q.PromptsPerMinute = 5 }), &base,
			-1, billing.Rates{ConnectsPerUser: 120, ConnectsPerIssuer: 6000, PromptsPerUser: 5, PromptsPerIssuer: 3000}},
		{"issuer prompts alone: the rest stay the defaults",
			with(func(q *billing.Quota) { q.IssuerPromptsPerMinute = 7 }), nil,
			-1, billing.Rates{ConnectsPerUser: 120, ConnectsPerIssuer: 6000, PromptsPerUser: 60, PromptsPerIssuer: 7}},
		{"issuer-wide fields on an override are not read", nil,
			with(func(q *billing.Quota) {
				q.MaxIssuerSessions, q.IssuerConnectsPerMinute, q.IssuerPromptsPerMinute = 1, 1, 1
			}),
			-1, defaults},
		{"issuer-wide fields on an override are not read, beside an issuer default", &base,
			with(func(q *billing.Quota) { q.IssuerPromptsPerMinute = 1 }),
			-1, defaults},
		{"unlimited", with(func(q *billing.Quota) {
			q.MaxIssuerSessions, q.ConnectsPerMinute, q.IssuerConnectsPerMinute, q.PromptsPerMinute = -1, -1, -1, -1
			q.IssuerPromptsPerMinute = -1
		}), nil, -1, billing.UnlimitedRates},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := billing.EffectiveLimitWith(billing.Budget{AIMicros: 5, ComputeSeconds: 6}, defaults, tc.issuer, tc.user)
			if got.MaxIssuerSessions != tc.issuerSessions || got.Rates != tc.rates {
				t.Fatalf("EffectiveLimitWith = issuer sessions %d, rates %+v; want %d, %+v", got.MaxIssuerSessions, got.Rates,
					tc.issuerSessions, tc.rates)
			}
		})
	}
}

func TestQuotaValidateFor(t *testing.T) {
	issuer, user := billing.QuotaKey{Issuer: "acme"}, billing.QuotaKey{Issuer: "acme", User: "u"}
	q := billing.Quota{AIMicros: 1, ComputeSeconds: 1, Window: billing.Day, MaxConcurrentSessions: 1,
		ConnectsPerMinute: -1, PromptsPerMinute: 9}
	if err := q.ValidateFor(user); err != nil {
		t.Fatalf("per-user rates on an override: %v", err)
	}
	for name, mod := range map[string]func(q *billing.Quota){
		"issuer sessions":        func(q *billing.Quota) { q.MaxIssuerSessions = 3 },
		"issuer sessions -1 too": func(q *billing.Quota) { q.MaxIssuerSessions = -1 },
		"issuer connects":        func(q *billing.Quota) { q.IssuerConnectsPerMinute = -1 },
		"issuer prompts":         func(q *billing.Quota) { q.IssuerPromptsPerMinute = 30 },
	} {
		bad := q
		mod(&bad)
		if err := bad.ValidateFor(issuer); err != nil {
			t.Errorf("%s on the issuer's default: %v", name, err)
		}
		if err := bad.ValidateFor(user); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("%s on a user's override: %v, want ErrInvalid", name, err)
		}
	}
	for name, mod := range map[string]func(q *billing.Quota){
		"issuer sessions": func(q *billing.Quota) { q.MaxIssuerSessions = -2 },
		"connects":        func(q *billing.Quota) { q.ConnectsPerMinute = -2 },
		"issuer connects": func(q *billing.Quota) { q.IssuerConnectsPerMinute = -5 },
		"prompts":         func(q *billing.Quota) { q.PromptsPerMinute = -2 },
		"issuer prompts":  func(q *billing.Quota) { q.IssuerPromptsPerMinute = -2 },
	} {
		bad := q
		mod(&bad)
		if err := bad.ValidateFor(issuer); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("%s below -1: %v, want ErrInvalid", name, err)
		}
	}
}

// The sandbox limits: each field is the override's when set, else the issuer default's, else 0 (the
// runner's default); -1 is unlimited; every field lands in its own field of wire.SandboxLimits.
func TestEffectiveLimitSandbox(t *testing.T) {
	base := billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Day, MaxConcurrentSessions: 4, Revision: 1}
	with := func(s billing.SandboxQuota) *billing.Quota {
		q := base
		q.SandboxQuota = s
		return &q
	}
	all := billing.SandboxQuota{MaxProcesses: 64, MaxMemoryBytes: 512 << 20, CPUMillis: 1500, MaxTmpBytes: 2 << 20,
		MaxWorkspaceBytes: 3 << 30, MaxConcurrentExecs: 4, MaxStoredBytes: 5 << 30}
	for _, tc := range []struct {
		name         string
		issuer, user *billing.Quota
		want         wire.SandboxLimits
	}{
		{"no quota: the runner's defaults", nil, nil, wire.SandboxLimits{}},
		{"quotas without the fields: the runner's defaults", &base, &base, wire.SandboxLimits{}},
		{"issuer sets all", with(all), nil, wire.SandboxLimits{Processes: 64, MemoryBytes: 512 << 20, CPUMillis: 1500,
			TmpBytes: 2 << 20, WorkspaceBytes: 3 << 30, ConcurrentExecs: 4, StoredBytes: 5 << 30}},
		{"override sets all", nil, with(all), wire.SandboxLimits{Processes: 64, MemoryBytes: 512 << 20, CPUMillis: 1500,
			TmpBytes: 2 << 20, WorkspaceBytes: 3 << 30, ConcurrentExecs: 4, StoredBytes: 5 << 30}},
		{"override's fields replace the issuer's, even higher; the rest stay the issuer's", with(all),
			with(billing.SandboxQuota{MaxMemoryBytes: 8 << 30, CPUMillis: -1, MaxStoredBytes: 16 << 20}),
			wire.SandboxLimits{Processes: 64, MemoryBytes: 8 << 30, CPUMillis: -1, TmpBytes: 2 << 20,
				WorkspaceBytes: 3 << 30, ConcurrentExecs: 4, StoredBytes: 16 << 20}},
		{"issuer unlimited, override unset", with(billing.SandboxQuota{MaxProcesses: -1, MaxConcurrentExecs: -1}), &base,
			wire.SandboxLimits{Processes: -1, ConcurrentExecs: -1}},
		{"the per-user limits that were flags, override over issuer", with(billing.SandboxQuota{MaxBackgroundProcesses: 4,
			MaxProcessLogBytes: 8 << 10, MaxFileWatches: 2, MaxTerminals: 3, MaxTasks: 5, MaxPreviewURLs: 6}),
			with(billing.SandboxQuota{MaxBackgroundProcesses: 1, MaxPreviewURLs: -1}),
			wire.SandboxLimits{BackgroundProcesses: 1, ProcessLogBytes: 8 << 10, FileWatches: 2, Terminals: 3, Tasks: 5,
				PreviewURLs: -1}},
		{"override alone, beside an issuer default without them", &base,
			with(billing.SandboxQuota{MaxTmpBytes: 64 << 20, MaxWorkspaceBytes: -1}),
			wire.SandboxLimits{TmpBytes: 64 << 20, WorkspaceBytes: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := billing.EffectiveLimitWith(billing.Budget{AIMicros: 5, ComputeSeconds: 6}, billing.UnlimitedRates, tc.issuer, tc.user)
			if got.Sandbox != tc.want {
				t.Fatalf("EffectiveLimitWith sandbox = %+v, want %+v", got.Sandbox, tc.want)
			}
		})
	}
}

// A sandbox limit is -1, 0 or at least its minimum, on the issuer's default and on a user's override
// alike; anything else is refused with ErrInvalid.
func TestQuotaValidateSandbox(t *testing.T) {
	issuer, user := billing.QuotaKey{Issuer: "acme"}, billing.QuotaKey{Issuer: "acme", User: "u"}
	q := billing.Quota{AIMicros: 1, ComputeSeconds: 1, Window: billing.Day, MaxConcurrentSessions: 1}
	for _, f := range []struct {
		name string
		min  int64
		v    func(s *billing.SandboxQuota) *int64
	}{
		{"processes", billing.MinSandboxProcesses, func(s *billing.SandboxQuota) *int64 { return &s.MaxProcesses }},
		{"memory", billing.MinSandboxMemoryBytes, func(s *billing.SandboxQuota) *int64 { return &s.MaxMemoryBytes }},
		{"cpu", billing.MinSandboxCPUMillis, func(s *billing.SandboxQuota) *int64 { return &s.CPUMillis }},
		{"tmp", billing.MinSandboxTmpBytes, func(s *billing.SandboxQuota) *int64 { return &s.MaxTmpBytes }},
		{"workspace", billing.MinSandboxWorkspaceBytes, func(s *billing.SandboxQuota) *int64 { return &s.MaxWorkspaceBytes }},
		{"execs", billing.MinSandboxConcurrentExecs, func(s *billing.SandboxQuota) *int64 { return &s.MaxConcurrentExecs }},
		{"stored", billing.MinSandboxStoredBytes, func(s *billing.SandboxQuota) *int64 { return &s.MaxStoredBytes }},
		{"background processes", billing.MinSandboxBackgroundProcesses, func(s *billing.SandboxQuota) *int64 { return &s.MaxBackgroundProcesses }},
		{"file watches", billing.MinSandboxFileWatches, func(s *billing.SandboxQuota) *int64 { return &s.MaxFileWatches }},
		{"terminals", billing.MinSandboxTerminals, func(s *billing.SandboxQuota) *int64 { return &s.MaxTerminals }},
		{"tasks", billing.MinSandboxTasks, func(s *billing.SandboxQuota) *int64 { return &s.MaxTasks }},
		{"preview urls", billing.MinSandboxPreviewURLs, func(s *billing.SandboxQuota) *int64 { return &s.MaxPreviewURLs }},
	} {
		for _, v := range []int64{-1, 0, f.min, f.min + 1, 1 << 40} {
			ok := q
			*f.v(&ok.SandboxQuota) = v
			for _, k := range []billing.QuotaKey{issuer, user} {
				if err := ok.ValidateFor(k); err != nil {
					t.Errorf("%s %d on %+v: %v", f.name, v, k, err)
				}
			}
		}
		for _, v := range []int64{-2, 1, f.min - 1, -1 << 62} {
			if v == 0 || v == -1 || v >= f.min {
				continue // under a minimum of 1 (execs) only the negatives are out of range
			}
			bad := q
			*f.v(&bad.SandboxQuota) = v
			for _, k := range []billing.QuotaKey{issuer, user} {
				if err := bad.ValidateFor(k); !errors.Is(err, billing.ErrInvalid) {
					t.Errorf("%s %d on %+v: %v, want ErrInvalid", f.name, v, k, err)
				}
			}
		}
	}
}

func TestUsageCursorRoundTrip(t *testing.T) {
	row := billing.UsageRow{Issuer: "acme", Key: "ünïcode, \"quoted\""}
	c := billing.CursorAfter(billing.GroupByModel, row)
	got, err := billing.ParseUsageCursor(c, billing.GroupByModel)
	if err != nil || got.Issuer != row.Issuer || got.Key != row.Key || got.GroupBy != billing.GroupByModel {
		t.Fatalf("ParseUsageCursor = %+v, %v", got, err)
	}
	if _, err := billing.ParseUsageCursor(c, billing.GroupByUser); !errors.Is(err, billing.ErrInvalid) {
		t.Fatalf("cursor of another grouping: %v, want ErrInvalid", err)
	}
}

func TestPricesMatch(t *testing.T) {
	ps := billing.DefaultPrices()
	for _, tc := range []struct{ model, want string }{
		{"claude-opus-4-5-20251101", "claude-opus-4-5"},
		{"claude-opus-4-1", "claude-opus"},
		{"gpt-5", ""},
	} {
		name, p := ps.Match(tc.model)
		if name != tc.want || p != ps.Lookup(tc.model) {
			t.Errorf("Match(%q) = %q, %+v; want %q and Lookup's price", tc.model, name, p, tc.want)
		}
	}
}

// max_process_log_bytes is 0 or MinSandboxProcessLogBytes to MaxSandboxProcessLogBytes: the runner keeps
// each log in its own memory, so it cannot be unlimited (-1) nor above the ceiling.
func TestQuotaValidateProcessLogBytes(t *testing.T) {
	q := billing.Quota{AIMicros: 1, ComputeSeconds: 1, Window: billing.Day, MaxConcurrentSessions: 1}
	for v, want := range map[int64]bool{0: true, billing.MinSandboxProcessLogBytes: true, 1 << 20: true,
		billing.MaxSandboxProcessLogBytes: true, -1: false, -2: false, 1: false, billing.MinSandboxProcessLogBytes - 1: false,
		billing.MaxSandboxProcessLogBytes + 1: false, 1 << 40: false} {
		q.MaxProcessLogBytes = v
		for _, k := range []billing.QuotaKey{{Issuer: "acme"}, {Issuer: "acme", User: "u"}} {
			err := q.ValidateFor(k)
			if want && err != nil {
				t.Errorf("max_process_log_bytes %d on %+v: %v", v, k, err)
			}
			if !want && (!errors.Is(err, billing.ErrInvalid) || !strings.Contains(err.Error(), "max_process_log_bytes")) {
				t.Errorf("max_process_log_bytes %d on %+v: %v, want ErrInvalid naming the field", v, k, err)
			}
		}
	}
	min, max, unlimited, ok := billing.SandboxFieldBounds("max_process_log_bytes")
	if !ok || min != billing.MinSandboxProcessLogBytes || max != billing.MaxSandboxProcessLogBytes || unlimited {
		t.Errorf("SandboxFieldBounds(max_process_log_bytes) = %d, %d, %v, %v", min, max, unlimited, ok)
	}
	if _, max, unlimited, ok := billing.SandboxFieldBounds("max_terminals"); !ok || max != 0 || !unlimited {
		t.Errorf("SandboxFieldBounds(max_terminals) = %d, %v, %v", max, unlimited, ok)
	}
	if _, _, _, ok := billing.SandboxFieldBounds("ai_microdollars"); ok {
		t.Error("SandboxFieldBounds knows a field that is not a sandbox limit")
	}
}
