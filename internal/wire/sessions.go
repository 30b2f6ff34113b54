package wire

// SessionSummary is one conversation of the user's sandbox in GET /v1/sessions (docs/PROTOCOL.md#sessions),
// read from the agent's transcript. Title is the transcript's summary when the agent wrote one;
// FirstPrompt is the first prompt, at most MaxSessionPrompt bytes. Times are RFC 3339. CostMicros is the
// model cost of the transcript's model calls at the runner's prices, in microdollars: an estimate of what
// was charged (the ledger is authoritative). Live: a client is attached or a turn runs now.
type SessionSummary struct {
	ID          string `json:"id"`
	Title       string `json:"title,omitempty"`
	FirstPrompt string `json:"firstPrompt,omitempty"`
	Created     string `json:"created,omitempty"`
	LastTurn    string `json:"lastTurn,omitempty"`
	CostMicros  int64  `json:"costMicrodollars"`
	Live        bool   `json:"live,omitempty"`
}

// SessionList answers GET /v1/sessions: the most recent first, at most MaxSessionList.
type SessionList struct {
	Sessions []SessionSummary `json:"sessions"`
}

// Bounds of the session listing.
const (
	MaxSessionPrompt = 256
	MaxSessionList   = 1000
)
