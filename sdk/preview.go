package warren

import (
	"context"
	"net/http"
	"net/url"

	"github.com/warren-mesh/warren/internal/wire"
)

// Preview URLs (docs/PROTOCOL.md#previews): a port the sandbox listens on, reachable from the internet
// through the edge, HTTP and WebSocket.
type (
	PreviewRequest = wire.PreviewRequest
	Preview        = wire.Preview
)

// CreatePreview makes a preview URL of a port of the sandbox. It is private (only this user, with the
// token once in the URL's ?token= or in Authorization) unless req.Public. The user's live previews are
// limited: resource_exhausted (details.max_previews) when there are too many.
func (s *Sandbox) CreatePreview(ctx context.Context, req PreviewRequest) (*Preview, error) {
	var p Preview
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandbox/previews", nil, req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Previews lists the user's live preview URLs, oldest first.
func (s *Sandbox) Previews(ctx context.Context) ([]Preview, error) {
	var l wire.PreviewList
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/previews", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Previews, nil
}

// RevokePreview revokes a preview URL at once, at every edge: not_found when the user has none of that id.
func (s *Sandbox) RevokePreview(ctx context.Context, id string) error {
	return s.c.doJSON(ctx, http.MethodDelete, "/v1/sandbox/previews/"+url.PathEscape(id), nil, nil, nil)
}
