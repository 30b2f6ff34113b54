package warren

import (
	"context"
	"net/http"
	"net/url"

	"github.com/warren-mesh/warren/internal/wire"
)

// SessionSummary describes one conversation of the user's sandbox (docs/PROTOCOL.md#sessions).
type SessionSummary = wire.SessionSummary

// Sessions lists the user's conversations, the most recently active first. Any of them can be resumed
// with SessionOptions.SessionID.
func (c *Client) Sessions(ctx context.Context) ([]SessionSummary, error) {
	var l wire.SessionList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/sessions", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// DeleteSession deletes a conversation's transcript. A live one (a client attached or a turn running) is
// CodeConflict; an unknown one CodeNotFound.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil, nil)
}
