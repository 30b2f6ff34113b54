package wire

import "time"

// PreviewRequest is the body of POST /v1/sandbox/previews (docs/PROTOCOL.md#previews).
type PreviewRequest struct {
	Port       int   `json:"port"`                  // 1..65535, a port the sandbox listens on (loopback)
	Public     bool  `json:"public,omitempty"`      // reachable without the owner's token
	TTLSeconds int64 `json:"ttl_seconds,omitempty"` // 0: the edge's default (one hour)
}

// Preview is a preview URL as its owner sees it.
type Preview struct {
	ID      string    `json:"id"`
	Token   string    `json:"token"` // <port>-<id>-<sig>
	URL     string    `json:"url"`   // https://<token>.<domain>/, or <preview origin>/preview/<token>/ (warren dev: not the edge's origin)
	Port    int       `json:"port"`
	Public  bool      `json:"public"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// PreviewList is the body of GET /v1/sandbox/previews: the caller's live previews, oldest first.
type PreviewList struct {
	Previews []Preview `json:"previews"`
}
