package billing

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// The admin ports' sentinel errors. They live here rather than in errors.go only because this change may
// not touch existing files; move them there with the next edit of errors.go.
var (
	// ErrNotFound: the issuer, quota or price asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a write named a revision that is no longer the current one.
	ErrConflict = errors.New("stale revision")
)

// Unlimited is the value written for a limit without a ceiling. Any negative limit reads as unlimited.
const Unlimited = -1

// MaxNameLen bounds issuer ids, user ids, issuer names and model names (as the token package bounds iss and
// sub).
const MaxNameLen = 256

// Issuer is a registered issuer (a customer's project): the iss of its users' tokens.
type Issuer struct {
	ID      string    `json:"iss"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Disabled issuers' tokens are refused by every edge (SetIssuerDisabled); their records, keys and
	// usage stay.
	Disabled bool `json:"disabled"`
	// Quota is the issuer's default quota (nil when none is set). It is read here for convenience and
	// written through Quotas.
	Quota *Quota `json:"default_quota,omitempty"`
}

// Quota is a platform team's ceiling for an issuer (the default of all its users) or for one user of it
// (an override of that default). Amounts are per window; zero allows nothing and a negative value is
// unlimited, as in Budget.
//
// The admission fields after MaxConcurrentSessions came later and read differently: 0 means not set (so
// quotas written before them, and writers that leave them out, keep the edge's behaviour), -1 unlimited,
// and a positive value the limit. The per-user rates of a user's override take the place of the issuer
// default's when set; the issuer-wide fields are read from the issuer's default alone and must be 0 on an
// override (ValidateFor). The sandbox's hard limits (SandboxQuota) read the same way, per user.
type Quota struct {
	AIMicros              int64  `json:"ai_microdollars"`
	ComputeSeconds        int64  `json:"compute_seconds"`
	Window                Window `json:"window"`
	MaxConcurrentSessions int64  `json:"max_concurrent_sessions"`
	// MaxIssuerSessions caps the sessions all of the issuer's users run at once (issuer default only); not
	// set: no issuer-wide cap.
	MaxIssuerSessions int64 `json:"max_issuer_sessions"`
	// ConnectsPerMinute is each user's agent connects per minute; not set: the edge's default.
	ConnectsPerMinute int64 `json:"connects_per_minute"`
	// IssuerConnectsPerMinute is the agent connects per minute of all the issuer's users together (issuer
	// default only); not set: the edge's default.
	IssuerConnectsPerMinute int64 `json:"issuer_connects_per_minute"`
	// PromptsPerMinute is each user's prompts per minute; not set: the edge's default.
	PromptsPerMinute int64 `json:"prompts_per_minute"`
	// IssuerPromptsPerMinute is the prompts per minute of all the issuer's users together (issuer default
	// only); not set: the edge's default.
	IssuerPromptsPerMinute int64 `json:"issuer_prompts_per_minute"`
	// SandboxQuota are the hard limits of each user's sandbox.
	SandboxQuota
	// Revision counts the writes of this quota: 1 after the first, +1 after every other. Writers name the
	// revision they read (optimistic concurrency).
	Revision int64 `json:"revision"`
}

// SandboxQuota are the hard resource limits of a user's sandbox a quota sets, the grant's
// wire.SandboxLimits (the runner enforces them). Each reads like the admission fields: 0 not set (a user's
// override falls back to the issuer's default, that to the runner's default), -1 unlimited, else the limit,
// which must be at least the field's minimum (MinSandboxMemoryBytes and the others), so that a quota cannot
// leave a sandbox unable to run anything by accident.
type SandboxQuota struct {
	// MaxProcesses caps the processes and threads alive in the sandbox at once.
	MaxProcesses int64 `json:"max_processes"`
	// MaxMemoryBytes caps the sandbox's memory.
	MaxMemoryBytes int64 `json:"max_memory_bytes"`
	// CPUMillis caps the sandbox's CPU in thousandths of a core (1000: one core).
	CPUMillis int64 `json:"cpu_millis"`
	// MaxTmpBytes caps each command's private /tmp.
	MaxTmpBytes int64 `json:"max_tmp_bytes"`
	// MaxWorkspaceBytes caps the bytes stored under /workspace.
	MaxWorkspaceBytes int64 `json:"max_workspace_bytes"`
	// MaxConcurrentExecs caps the commands running at once.
	MaxConcurrentExecs int64 `json:"max_concurrent_execs"`
	// MaxStoredBytes caps the bytes the user's snapshots keep in the blob store.
	MaxStoredBytes int64 `json:"max_stored_bytes"`
	// MaxBackgroundProcesses caps the background processes running at once (the runner's -max-processes
	// when not set; unlimited is the runner's hard ceiling).
	MaxBackgroundProcesses int64 `json:"max_background_processes"`
	// MaxProcessLogBytes caps the output kept of each background process (the runner's -process-log-bytes
	// when not set). The log is held in the runner's memory, outside the sandbox's cgroup, so it may not be
	// unlimited and is at most MaxSandboxProcessLogBytes.
	MaxProcessLogBytes int64 `json:"max_process_log_bytes"`
	// MaxFileWatches caps the file watch subscribers of a sandbox at once.
	MaxFileWatches int64 `json:"max_file_watches"`
	// MaxTerminals caps the terminals running at once in a sandbox.
	MaxTerminals int64 `json:"max_terminals"`
	// MaxTasks caps the user's one-shot tasks queued or running at once (the runner's -max-tasks when not
	// set).
	MaxTasks int64 `json:"max_tasks"`
	// MaxPreviewURLs caps the user's live preview URLs (the edge's -preview-max-per-user when not set).
	MaxPreviewURLs int64 `json:"max_preview_urls"`
}

// The smallest limits a SandboxQuota may set (besides 0, not set, and -1, unlimited).
const (
	MinSandboxProcesses       = 8
	MinSandboxMemoryBytes     = 16 << 20
	MinSandboxCPUMillis       = 10
	MinSandboxTmpBytes        = 1 << 20
	MinSandboxWorkspaceBytes  = 1 << 20
	MinSandboxConcurrentExecs = 1
	MinSandboxStoredBytes     = 1 << 20

	MinSandboxBackgroundProcesses = 1
	MinSandboxProcessLogBytes     = 4 << 10
	MinSandboxFileWatches         = 1
	MinSandboxTerminals           = 1
	MinSandboxTasks               = 1
	MinSandboxPreviewURLs         = 1
)

// MaxSandboxProcessLogBytes is the largest max_process_log_bytes, which may not be -1 either: each
// process's log lives in the runner's memory, outside the sandbox's cgroup, and a runner keeps up to twice
// its background process cap of them, so an unbounded log would let a tenant's program fill the runner's
// memory by printing.
const MaxSandboxProcessLogBytes = 64 << 20

// sandboxCeilings are the fields with a largest value, which refuse -1 (unlimited) too.
var sandboxCeilings = map[string]int64{"max_process_log_bytes": MaxSandboxProcessLogBytes}

// SandboxFieldBounds reports what the SandboxQuota field of JSON name accepts besides 0 (not set): -1 when
// unlimited, and a positive value from min to max (max 0: no largest). ok is false for an unknown name.
func SandboxFieldBounds(name string) (min, max int64, unlimited, ok bool) {
	for _, f := range sandboxFields {
		if f.name == name {
			max = sandboxCeilings[name]
			return f.min, max, max == 0, true
		}
	}
	return 0, 0, false, false
}

// sandboxField is one field of a SandboxQuota and of the wire.SandboxLimits it becomes.
type sandboxField struct {
	name  string // JSON name
	min   int64
	quota func(*SandboxQuota) *int64
	wire  func(*wire.SandboxLimits) *int64
}

var sandboxFields = []sandboxField{
	{"max_processes", MinSandboxProcesses,
		func(s *SandboxQuota) *int64 { return &s.MaxProcesses }, func(l *wire.SandboxLimits) *int64 { return &l.Processes }},
	{"max_memory_bytes", MinSandboxMemoryBytes,
		func(s *SandboxQuota) *int64 { return &s.MaxMemoryBytes }, func(l *wire.SandboxLimits) *int64 { return &l.MemoryBytes }},
	{"cpu_millis", MinSandboxCPUMillis,
		func(s *SandboxQuota) *int64 { return &s.CPUMillis }, func(l *wire.SandboxLimits) *int64 { return &l.CPUMillis }},
	{"max_tmp_bytes", MinSandboxTmpBytes,
		func(s *SandboxQuota) *int64 { return &s.MaxTmpBytes }, func(l *wire.SandboxLimits) *int64 { return &l.TmpBytes }},
	{"max_workspace_bytes", MinSandboxWorkspaceBytes,
		func(s *SandboxQuota) *int64 { return &s.MaxWorkspaceBytes }, func(l *wire.SandboxLimits) *int64 { return &l.WorkspaceBytes }},
	{"max_concurrent_execs", MinSandboxConcurrentExecs,
		func(s *SandboxQuota) *int64 { return &s.MaxConcurrentExecs }, func(l *wire.SandboxLimits) *int64 { return &l.ConcurrentExecs }},
	{"max_stored_bytes", MinSandboxStoredBytes,
		func(s *SandboxQuota) *int64 { return &s.MaxStoredBytes }, func(l *wire.SandboxLimits) *int64 { return &l.StoredBytes }},
	{"max_background_processes", MinSandboxBackgroundProcesses,
		func(s *SandboxQuota) *int64 { return &s.MaxBackgroundProcesses }, func(l *wire.SandboxLimits) *int64 { return &l.BackgroundProcesses }},
	{"max_process_log_bytes", MinSandboxProcessLogBytes,
		func(s *SandboxQuota) *int64 { return &s.MaxProcessLogBytes }, func(l *wire.SandboxLimits) *int64 { return &l.ProcessLogBytes }},
	{"max_file_watches", MinSandboxFileWatches,
		func(s *SandboxQuota) *int64 { return &s.MaxFileWatches }, func(l *wire.SandboxLimits) *int64 { return &l.FileWatches }},
	{"max_terminals", MinSandboxTerminals,
		func(s *SandboxQuota) *int64 { return &s.MaxTerminals }, func(l *wire.SandboxLimits) *int64 { return &l.Terminals }},
	{"max_tasks", MinSandboxTasks,
		func(s *SandboxQuota) *int64 { return &s.MaxTasks }, func(l *wire.SandboxLimits) *int64 { return &l.Tasks }},
	{"max_preview_urls", MinSandboxPreviewURLs,
		func(s *SandboxQuota) *int64 { return &s.MaxPreviewURLs }, func(l *wire.SandboxLimits) *int64 { return &l.PreviewURLs }},
}

// invalidField names the first field of s out of range (below -1, or positive and below its minimum; for a
// field with a ceiling, -1 or above it) and says why; "" when every field is valid.
func (s SandboxQuota) invalidField() (field, why string) {
	for _, f := range sandboxFields {
		v := *f.quota(&s)
		if ceiling := sandboxCeilings[f.name]; ceiling > 0 {
			if v < 0 || (v > 0 && (v < f.min || v > ceiling)) {
				return f.name, fmt.Sprintf("%s must be 0 (not set) or %d to %d, not %d (it cannot be unlimited: "+
					"the runner holds it in memory)", f.name, f.min, ceiling, v)
			}
			continue
		}
		if v < Unlimited || (v > 0 && v < f.min) {
			return f.name, fmt.Sprintf("%s must be -1 (unlimited), 0 (not set) or at least %d, not %d",
				f.name, f.min, v)
		}
	}
	return "", ""
}

// QuotaKey names a quota: the issuer's default when User is empty, else the override of that user.
type QuotaKey struct {
	Issuer string
	User   string
}

// Issuers registers and lists issuers. Safe for concurrent use.
type Issuers interface {
	// PutIssuer registers the issuer or renames it (keeping Created) and returns it as stored. ErrInvalid
	// for a bad id or name; errors wrapping ErrUnavailable when the store cannot be reached.
	PutIssuer(ctx context.Context, id, name string) (Issuer, error)
	// GetIssuer returns the issuer with its default quota. ErrNotFound when it is not registered.
	GetIssuer(ctx context.Context, id string) (Issuer, error)
	// ListIssuers returns every registered issuer with its default quota, ordered by id.
	ListIssuers(ctx context.Context) ([]Issuer, error)
	// SetIssuerDisabled disables (or enables again) the issuer and returns it. ErrNotFound when it is not
	// registered; ErrInvalid for a bad id.
	SetIssuerDisabled(ctx context.Context, id string, disabled bool) (Issuer, error)
}

// Quotas reads and writes quotas with optimistic concurrency. Safe for concurrent use, also across
// processes sharing a store.
type Quotas interface {
	// GetQuota returns the quota stored under k. ErrNotFound when there is none.
	GetQuota(ctx context.Context, k QuotaKey) (Quota, error)
	// PutQuota stores q under k if k's current revision is expected (0: k has no quota yet) and returns q
	// with its new revision, expected+1; q.Revision is ignored. ErrConflict when the revision is stale;
	// ErrNotFound when k's issuer is not registered; ErrInvalid for a bad key or quota.
	PutQuota(ctx context.Context, k QuotaKey, q Quota, expected int64) (Quota, error)
	// DeleteQuota deletes the quota stored under k if its current revision is expected: a user's override
	// then falls back to the issuer's default, an issuer's default to no cap. ErrNotFound when k has no
	// quota; ErrConflict when the revision is stale; ErrInvalid for a bad key.
	DeleteQuota(ctx context.Context, k QuotaKey, expected int64) error
}

// PriceStore keeps the per-model overrides of DefaultPrices. Safe for concurrent use.
type PriceStore interface {
	// GetPrice returns the override stored for exactly model. ErrNotFound when there is none.
	GetPrice(ctx context.Context, model string) (Price, error)
	// PutPrice stores (or replaces) model's override. ErrInvalid for a bad name or a negative price.
	PutPrice(ctx context.Context, model string, p Price) error
	// DeletePrice removes model's override (the built-in price, if any, applies again). ErrNotFound when
	// there is none; ErrInvalid for a bad name.
	DeletePrice(ctx context.Context, model string) error
	// ListPrices returns every override by model name.
	ListPrices(ctx context.Context) (map[string]Price, error)
}

// UsageQuery reports recorded usage. Safe for concurrent use.
type UsageQuery interface {
	// QueryUsage sums the usage events of f's range into rows grouped by f.GroupBy, ordered by issuer and
	// group key, one page at a time. ErrInvalid for a filter that fails Validate (a bad cursor included).
	QueryUsage(ctx context.Context, f UsageFilter) (UsagePage, error)
}

// AdminStore is everything the billing API keeps in the ledger's database.
type AdminStore interface {
	Issuers
	Quotas
	PriceStore
	UsageQuery
	APIKeys
}

// GroupBy is how QueryUsage groups events.
type GroupBy string

// The groupings of QueryUsage. Every row also carries the issuer, the first sort key.
const (
	GroupByUser  GroupBy = "user"  // per end user
	GroupByDay   GroupBy = "day"   // per UTC day of the event time
	GroupByModel GroupBy = "model" // per model; compute time has the empty model
)

// Valid reports whether g is a known grouping.
func (g GroupBy) Valid() bool { return g == GroupByUser || g == GroupByDay || g == GroupByModel }

// Page sizes of QueryUsage.
const (
	DefaultUsageLimit = 100
	MaxUsageLimit     = 1000
)

// UsageFilter selects the events QueryUsage sums: those at or after From and before To, of Issuer and User
// when set.
type UsageFilter struct {
	Issuer  string
	User    string // needs Issuer
	From    time.Time
	To      time.Time
	GroupBy GroupBy
	Cursor  string // NextCursor of the previous page; empty for the first
	Limit   int    // rows per page, 1 to MaxUsageLimit
}

// UsageRow is the usage of one group.
type UsageRow struct {
	Issuer string
	// Key is the group: the user, the UTC day as 2006-01-02, or the model ("" for compute time).
	Key            string
	AIMicros       int64
	ComputeSeconds int64
	Events         int64
}

// UsageTotals sums every row of a filter, not only one page's.
type UsageTotals struct {
	AIMicros       int64 `json:"ai_microdollars"`
	ComputeSeconds int64 `json:"compute_seconds"`
	Events         int64 `json:"events"`
}

// UsagePage is one page of QueryUsage.
type UsagePage struct {
	Rows   []UsageRow
	Totals UsageTotals
	// NextCursor continues after the last row; empty on the last page. Pages are keyed by the group, so
	// events recorded while paging may change rows not yet read but never repeat or skip a group.
	NextCursor string
}

// Validate reports, wrapping ErrInvalid, a filter without a range or with an empty one, a user without an
// issuer, bad names, an unknown grouping, a limit out of range, or a cursor not made for this grouping.
func (f UsageFilter) Validate() error {
	switch {
	case f.From.IsZero() || f.To.IsZero():
		return fmt.Errorf("usage filter without from or to: %w", ErrInvalid)
	case !f.From.Before(f.To):
		return fmt.Errorf("usage filter from %s is not before to %s: %w", f.From.Format(time.RFC3339), f.To.Format(time.RFC3339), ErrInvalid)
	case f.Issuer != "" && !ValidName(f.Issuer):
		return fmt.Errorf("usage filter: bad issuer: %w", ErrInvalid)
	case f.User != "" && (f.Issuer == "" || !ValidName(f.User)):
		return fmt.Errorf("usage filter: a user needs an issuer and a valid id: %w", ErrInvalid)
	case !f.GroupBy.Valid():
		return fmt.Errorf("usage filter: unknown grouping %q: %w", f.GroupBy, ErrInvalid)
	case f.Limit < 1 || f.Limit > MaxUsageLimit:
		return fmt.Errorf("usage filter: limit %d not in 1..%d: %w", f.Limit, MaxUsageLimit, ErrInvalid)
	}
	if f.Cursor != "" {
		if _, err := ParseUsageCursor(f.Cursor, f.GroupBy); err != nil {
			return err
		}
	}
	return nil
}

// UsageCursor is the position after a row of QueryUsage: the next page starts at the next group.
type UsageCursor struct {
	GroupBy GroupBy `json:"g"`
	Issuer  string  `json:"i"`
	Key     string  `json:"k"`
}

// CursorAfter is the cursor continuing after row r of a query grouped by g.
func CursorAfter(g GroupBy, r UsageRow) string {
	b, _ := json.Marshal(UsageCursor{GroupBy: g, Issuer: r.Issuer, Key: r.Key}) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseUsageCursor decodes a cursor made by CursorAfter for grouping g. A cursor that does not decode, or
// was made for another grouping, wraps ErrInvalid.
func ParseUsageCursor(s string, g GroupBy) (UsageCursor, error) {
	var c UsageCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) > 2*MaxNameLen+64 || strictjson.Unmarshal(b, &c) != nil || c.Issuer == "" {
		return UsageCursor{}, fmt.Errorf("malformed usage cursor: %w", ErrInvalid)
	}
	if c.GroupBy != g {
		return UsageCursor{}, fmt.Errorf("usage cursor of a query grouped by %q, not %q: %w", c.GroupBy, g, ErrInvalid)
	}
	return c, nil
}

// Validate reports, wrapping ErrInvalid, an unknown window, a limit below Unlimited (-1) or a sandbox limit
// below its minimum.
func (q Quota) Validate() error {
	switch {
	case !q.Window.Valid():
		return fmt.Errorf("quota: unknown window %q: %w", q.Window, ErrInvalid)
	case q.AIMicros < Unlimited || q.ComputeSeconds < Unlimited || q.MaxConcurrentSessions < Unlimited:
		return fmt.Errorf("quota: limits below %d: %w", Unlimited, ErrInvalid)
	case q.MaxIssuerSessions < Unlimited || q.ConnectsPerMinute < Unlimited || q.IssuerConnectsPerMinute < Unlimited ||
		q.PromptsPerMinute < Unlimited || q.IssuerPromptsPerMinute < Unlimited:
		return fmt.Errorf("quota: session cap or rate below %d: %w", Unlimited, ErrInvalid)
	}
	if _, why := q.SandboxQuota.invalidField(); why != "" {
		return fmt.Errorf("quota: %s: %w", why, ErrInvalid)
	}
	return nil
}

// ValidateFor is Validate for the quota stored under k: a user's override must also leave the issuer-wide
// fields (MaxIssuerSessions, IssuerConnectsPerMinute, IssuerPromptsPerMinute) unset, as they are read from
// the issuer's default alone. Failures wrap ErrInvalid.
func (q Quota) ValidateFor(k QuotaKey) error {
	if err := q.Validate(); err != nil {
		return err
	}
	if k.User != "" && (q.MaxIssuerSessions != 0 || q.IssuerConnectsPerMinute != 0 || q.IssuerPromptsPerMinute != 0) {
		return fmt.Errorf("quota of user %s/%s: max_issuer_sessions, issuer_connects_per_minute and issuer_prompts_per_minute belong to the issuer's default: %w",
			k.Issuer, k.User, ErrInvalid)
	}
	return nil
}

// String names the quota in errors: "issuer" for the issuer's default, "issuer/user" for an override.
func (k QuotaKey) String() string {
	if k.User == "" {
		return k.Issuer
	}
	return k.Issuer + "/" + k.User
}

// Validate reports, wrapping ErrInvalid, a key with a bad issuer or user id.
func (k QuotaKey) Validate() error {
	if !ValidName(k.Issuer) || (k.User != "" && !ValidName(k.User)) {
		return fmt.Errorf("quota key %q/%q: bad issuer or user id: %w", k.Issuer, k.User, ErrInvalid)
	}
	return nil
}

// MaxPrice bounds each price (microdollars per million tokens: one million USD), so costs cannot overflow.
const MaxPrice = 1_000_000_000_000

// Validate reports, wrapping ErrInvalid, a negative price or one above MaxPrice.
func (p Price) Validate() error {
	for _, v := range []int64{p.Input, p.Output, p.CacheRead, p.CacheCreation} {
		if v < 0 || v > MaxPrice {
			return fmt.Errorf("price %d not in 0..%d microdollars per million tokens: %w", v, int64(MaxPrice), ErrInvalid)
		}
	}
	return nil
}

// ValidName reports whether s is usable as an issuer, user or model name: 1 to MaxNameLen bytes of UTF-8
// without control or format characters (the token package's rule for iss and sub).
func ValidName(s string) bool {
	return s != "" && validText(s)
}

// validText is ValidName allowing the empty string (issuer display names).
func validText(s string) bool {
	if len(s) > MaxNameLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}

// ValidIssuerName reports whether s is usable as an issuer's display name: like ValidName, but may be empty.
func ValidIssuerName(s string) bool { return validText(s) }

// Limit is what the edge enforces on one user: a budget in the token's window, how many sessions may run
// at once, for the user and for its whole issuer, and the admission rates (negative: unlimited); and what
// it tells the user's runner to enforce, the sandbox's hard limits (zero: the runner's defaults).
type Limit struct {
	Budget
	MaxConcurrentSessions int64
	MaxIssuerSessions     int64
	Rates                 Rates
	Sandbox               wire.SandboxLimits
}

// Rates are admission rates per minute, each a token bucket whose burst equals its rate; negative is
// unlimited and 0 lets nothing in.
type Rates struct {
	ConnectsPerUser   int64 // agent connects of one user
	ConnectsPerIssuer int64 // agent connects of all the users of one issuer
	PromptsPerUser    int64 // prompts of one user
	PromptsPerIssuer  int64 // prompts of all the users of one issuer
}

// UnlimitedRates limit nothing.
var UnlimitedRates = Rates{ConnectsPerUser: Unlimited, ConnectsPerIssuer: Unlimited, PromptsPerUser: Unlimited,
	PromptsPerIssuer: Unlimited}

// EffectiveLimit is EffectiveLimitWith without default rates: the rates a quota leaves unset come out
// unlimited.
func EffectiveLimit(token Budget, issuer, user *Quota) Limit {
	return EffectiveLimitWith(token, UnlimitedRates, issuer, user)
}

// EffectiveLimitWith combines a token's budget with the quota that applies to its user: the user's override
// when there is one, else the issuer's default, else none. Each budget dimension and the user's session
// cap is the smaller of the two, a negative value standing for unlimited on either side; without a quota
// the token's budget stands and sessions are unlimited.
//
// The issuer-wide session cap and connect and prompt rates come from the issuer's default alone. Each
// per-user rate is the override's when it sets one, else the issuer default's, else defaults'; each
// issuer-wide rate is the issuer default's when set, else defaults'. Unset issuer session caps are
// unlimited. Each sandbox limit is the override's when it sets one, else the issuer default's, else 0 (the
// runner's default).
//
// The amounts are compared as they are, in the token's window: the ledger sums usage per token account, so
// a quota whose Window differs from the token's cannot be enforced over its own window by this function.
func EffectiveLimitWith(token Budget, defaults Rates, issuer, user *Quota) Limit {
	lim := Limit{Budget: token, MaxConcurrentSessions: Unlimited, MaxIssuerSessions: Unlimited, Rates: defaults}
	var userRates, issuerRates Quota // zero: nothing set
	if user != nil {
		userRates = *user
	}
	if issuer != nil {
		issuerRates = *issuer
		lim.MaxIssuerSessions = setOr(issuer.MaxIssuerSessions, Unlimited)
		lim.Rates.ConnectsPerIssuer = setOr(issuer.IssuerConnectsPerMinute, defaults.ConnectsPerIssuer)
		lim.Rates.PromptsPerIssuer = setOr(issuer.IssuerPromptsPerMinute, defaults.PromptsPerIssuer)
	}
	lim.Rates.ConnectsPerUser = setOr(userRates.ConnectsPerMinute, setOr(issuerRates.ConnectsPerMinute, defaults.ConnectsPerUser))
	lim.Rates.PromptsPerUser = setOr(userRates.PromptsPerMinute, setOr(issuerRates.PromptsPerMinute, defaults.PromptsPerUser))
	for _, f := range sandboxFields {
		*f.wire(&lim.Sandbox) = setOr(*f.quota(&userRates.SandboxQuota), setOr(*f.quota(&issuerRates.SandboxQuota), 0))
	}
	q := user
	if q == nil {
		q = issuer
	}
	if q == nil {
		return lim
	}
	lim.Budget = Budget{
		AIMicros:       minLimit(token.AIMicros, q.AIMicros),
		ComputeSeconds: minLimit(token.ComputeSeconds, q.ComputeSeconds),
	}
	lim.MaxConcurrentSessions = minLimit(Unlimited, q.MaxConcurrentSessions)
	return lim
}

// setOr is v when set (non-zero), negatives as Unlimited, else def.
func setOr(v, def int64) int64 {
	switch {
	case v < 0:
		return Unlimited
	case v == 0:
		return def
	}
	return v
}

// minLimit is the smaller of two limits where negative means unlimited; unlimited comes out as Unlimited.
func minLimit(a, b int64) int64 {
	switch {
	case a < 0 && b < 0:
		return Unlimited
	case a < 0:
		return b
	case b < 0:
		return a
	}
	return min(a, b)
}

// UserQuotas reads the two quotas EffectiveLimit combines for iss/sub: the issuer's default and the user's
// override, each nil when not set.
func UserQuotas(ctx context.Context, qs Quotas, iss, sub string) (issuer, user *Quota, err error) {
	get := func(k QuotaKey) (*Quota, error) {
		q, err := qs.GetQuota(ctx, k)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil, nil
		case err != nil:
			return nil, err
		}
		return &q, nil
	}
	if issuer, err = get(QuotaKey{Issuer: iss}); err != nil {
		return nil, nil, fmt.Errorf("quotas of %s/%s: %w", iss, sub, err)
	}
	if user, err = get(QuotaKey{Issuer: iss, User: sub}); err != nil {
		return nil, nil, fmt.Errorf("quotas of %s/%s: %w", iss, sub, err)
	}
	return issuer, user, nil
}

// EffectivePrices is DefaultPrices with the store's overrides on top.
func EffectivePrices(ctx context.Context, s PriceStore) (Prices, error) {
	overrides, err := s.ListPrices(ctx)
	if err != nil {
		return Prices{}, fmt.Errorf("effective prices: %w", err)
	}
	return withOverrides(overrides), nil
}

// Match is Lookup that also names the entry it picked: the longest model-name prefix of model, or "" for
// Default.
func (ps Prices) Match(model string) (name string, p Price) {
	p, bestLen := ps.Default, -1
	for n, np := range ps.Models {
		if strings.HasPrefix(model, n) && len(n) > bestLen {
			name, p, bestLen = n, np, len(n)
		}
	}
	return name, p
}
