package wire

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// HeaderGrant carries a Grant from the edge to a runner on every internal request. Runners trust it only
// because the request also carries their bearer key, which only the edge holds.
const HeaderGrant = "X-Warren-Grant"

// Grant is what the edge admitted: whose sandbox, which budget window is charged, the limits of that window
// and the token's permissions and sdkConfig (PROTOCOL.md §1), which override client session options.
type Grant struct {
	Issuer      string    `json:"iss"`
	User        string    `json:"sub"`
	Window      string    `json:"window"`
	WindowStart time.Time `json:"windowStart,omitzero"`
	// WindowAnchor is the token's own windowStart: the window rolls over from it (billing.CurrentWindowStart),
	// so a connection that outlives its window charges the next one. Zero: WindowStart is fixed.
	WindowAnchor   time.Time       `json:"windowAnchor,omitzero"`
	AIMicros       int64           `json:"ai"`      // limit for the window; < 0 unlimited
	ComputeSeconds int64           `json:"compute"` // limit for the window; < 0 unlimited
	Permissions    json.RawMessage `json:"permissions,omitempty"`
	SDKConfig      json.RawMessage `json:"sdkConfig,omitempty"`
}

// Encode is the header value: base64url of the JSON.
func (g Grant) Encode() string {
	b, _ := json.Marshal(g)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeGrant parses a header value.
func DecodeGrant(s string) (Grant, error) {
	var g Grant
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return g, Errorf(InvalidArgument, "grant header is not base64url")
	}
	if err := json.Unmarshal(b, &g); err != nil {
		return Grant{}, Errorf(InvalidArgument, "grant header: %v", err)
	}
	return g, nil
}
