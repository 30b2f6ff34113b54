package warren

import (
	"context"
	"net/http"

	"github.com/warren-mesh/warren/internal/wire"
)

// Me is the caller's own view (docs/PROTOCOL.md#me): budget left in the token's window, the sandbox's state
// and region, live sessions and the limits in force.
type Me = wire.Me

// Me asks the edge for the caller's own view, with the client's token. It starts no sandbox and works
// with a spent budget too.
func (c *Client) Me(ctx context.Context) (Me, error) {
	var me Me
	err := c.doJSON(ctx, http.MethodGet, "/v1/me", nil, nil, &me)
	return me, err
}
