// Package token is Warren's end-user JWT (docs/PROTOCOL.md#tokens): the typed claims, the Verifier the edge
// runs on every connection and request, and Mint for `warren token` and tests. Tokens are HS256 only, signed
// with an issuer's secret from the Secrets port; the header's kid picks a key version so issuers can rotate.
package token

import (
	"encoding/json"
	"time"
)

// Claims are a verified token's claims. Times are UTC; optional times are zero when absent.
type Claims struct {
	Issuer    string   // iss: the issuer (project) id
	Subject   string   // sub: the end user; with Issuer it names the user's sandbox
	Audience  []string // aud: a string or an array on the wire; nil when absent
	ExpiresAt time.Time
	IssuedAt  time.Time
	NotBefore time.Time

	// HasBudget reports whether the token carries a budget claim. A token without one grants no allowance
	// of its own; whether that means "issuer and user quotas only" or refusal is for admission (the
	// ledger) to decide, not the token. When false, Budget is the zero value.
	HasBudget bool
	Budget    Budget

	// Permissions are zero when the claim is absent.
	Permissions Permissions

	// SDKConfig is the sdkConfig claim, compact JSON of an object, nil when absent: session options
	// (docs/PROTOCOL.md#session-options) that override the client's. This package checks only that it is an
	// object; the session layer decodes it.
	SDKConfig json.RawMessage

	// Template is the template claim: the name of the issuer's workspace template a NEW sandbox of this
	// user starts from (docs/ARCHITECTURE.md#templates), "" when absent (the runner's default). A valid
	// name is 1 to 64 bytes of [a-z0-9._-] starting with a letter or digit (ValidTemplate). It matters only
	// when the sandbox is created: a sandbox with a snapshot of its own keeps its files whatever a later
	// token names.
	Template string
}

// MaxTemplateLen bounds a template name (the template claim; runner/templates uses the same rule).
const MaxTemplateLen = 64

// ValidTemplate reports whether name is a workspace template name: 1 to MaxTemplateLen bytes of
// [a-z0-9._-], starting with a letter or digit. runner/templates.CheckName applies the same rule.
func ValidTemplate(name string) bool {
	ok := name != "" && len(name) <= MaxTemplateLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		ok = alnum || (i > 0 && (c == '.' || c == '_' || c == '-'))
	}
	return ok
}

// Budget is the budget claim: what the user may spend in the current window.
type Budget struct {
	AIMicros       int64     `json:"ai,omitzero"`      // model budget in microdollars (1 USD = 1,000,000)
	ComputeSeconds int64     `json:"compute,omitzero"` // sandbox compute seconds
	Window         Window    `json:"window"`
	WindowStart    time.Time `json:"windowStart,omitzero"` // RFC 3339; required unless Window is lifetime
}

// Permissions is the permissions claim. A nil Tools means the token does not restrict tools; a non-nil Tools,
// even empty, allows only those (so "tools": [] allows none). MaxTurns 0 and Model "" mean no restriction.
type Permissions struct {
	Tools        []string `json:"tools,omitzero"`
	BlockedTools []string `json:"blockedTools,omitzero"`
	MaxTurns     int      `json:"maxTurns,omitzero"`
	Model        string   `json:"model,omitzero"`
}

// IsZero reports whether p restricts nothing, i.e. the claim may be omitted.
func (p Permissions) IsZero() bool {
	return p.Tools == nil && p.BlockedTools == nil && p.MaxTurns == 0 && p.Model == ""
}

// Window is the period a budget applies to.
type Window string

// The budget windows (docs/PROTOCOL.md#tokens).
const (
	WindowHour     Window = "hour"
	WindowDay      Window = "day"
	WindowWeek     Window = "week"
	WindowMonth    Window = "month"
	WindowLifetime Window = "lifetime"
)

// Valid reports whether w is one of the five windows.
func (w Window) Valid() bool {
	switch w {
	case WindowHour, WindowDay, WindowWeek, WindowMonth, WindowLifetime:
		return true
	}
	return false
}

// Start is the start of the UTC window of kind w that contains t: the hour, midnight, Monday midnight (ISO
// weeks) or the first of the month. It is zero for lifetime and for invalid windows.
func (w Window) Start(t time.Time) time.Time {
	t = t.UTC()
	y, m, d := t.Date()
	switch w {
	case WindowHour:
		return time.Date(y, m, d, t.Hour(), 0, 0, 0, time.UTC)
	case WindowDay:
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	case WindowWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
	case WindowMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}
