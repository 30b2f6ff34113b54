package wire

import "time"

// Me is the answer of GET /v1/me on the edge (docs/PROTOCOL.md#me): what the caller's own token may still
// spend, what its sandbox is doing, and the limits in force, read without starting anything.
type Me struct {
	Issuer string `json:"iss"`
	User   string `json:"sub"`
	// Region is the region of the edge that answered.
	Region   string        `json:"region"`
	Budget   MeBudget      `json:"budget"`
	Sandbox  MeSandbox     `json:"sandbox"`
	Sessions MeSessions    `json:"sessions"`
	Rates    MeRates       `json:"rates"`
	Limits   SandboxLimits `json:"limits"`
}

// MeBudget is the budget of the token's current window, after the quota caps it.
type MeBudget struct {
	Window      string    `json:"window"`
	WindowStart time.Time `json:"windowStart,omitzero"` // zero for a lifetime budget
	ResetsAt    time.Time `json:"resetsAt,omitzero"`    // when the next window begins; zero for lifetime
	AI          Allowance `json:"ai"`                   // microdollars
	Compute     Allowance `json:"compute"`              // seconds
}

// Allowance is one part of a budget: its limit, what is used of it, and what remains (-1 in Limit and
// Remaining: unlimited).
type Allowance struct {
	Limit     int64 `json:"limit"`
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
}

// The states of MeSandbox.
const (
	SandboxAbsent   = "absent"
	SandboxStarting = "starting"
	SandboxRunning  = "running"
	SandboxAsleep   = "asleep"
	SandboxUnknown  = "unknown" // the edge cannot read placements (no scheduler status)
)

// MeSandbox is the caller's sandbox as its placement says.
type MeSandbox struct {
	State  string    `json:"state"`
	Region string    `json:"region,omitempty"` // the region that holds (or last held) it
	Epoch  int64     `json:"epoch,omitempty"`
	Since  time.Time `json:"since,omitzero"` // when it entered State
}

// MeSessions counts the caller's live agent sessions against the cap (-1: unlimited). Live is -1 when the
// edge keeps no session leases.
type MeSessions struct {
	Live int64 `json:"live"`
	Max  int64 `json:"max"`
}

// MeRates are the caller's own admission rates per minute (-1: unlimited).
type MeRates struct {
	ConnectsPerMinute int64 `json:"connectsPerMinute"`
	PromptsPerMinute  int64 `json:"promptsPerMinute"`
}

// NewAllowance is the allowance of limit (negative: unlimited) with used spent.
func NewAllowance(limit, used int64) Allowance {
	if limit < 0 {
		return Allowance{Limit: -1, Used: used, Remaining: -1}
	}
	return Allowance{Limit: limit, Used: used, Remaining: max(0, limit-used)}
}
