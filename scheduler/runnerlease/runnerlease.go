// Package runnerlease tells runners their placement leases over their HTTP API (PUT /v1/lease with the
// runner's bearer key; docs/ARCHITECTURE.md#leases): the scheduler's scheduler.LeaseNotifier in production
// and in warren dev.
package runnerlease

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/wire"
)

// Client is a scheduler.LeaseNotifier. The zero value uses a client with a 5 s timeout.
type Client struct {
	HTTP *http.Client
}

var defaultClient = &http.Client{Timeout: 5 * time.Second}

// NotifyLease tells the runner of e that its placement is held until until. A refusal comes back as the
// runner's *wire.Error (conflict: the runner serves another epoch).
func (c *Client) NotifyLease(ctx context.Context, e registry.Entry, until time.Time) error {
	body, err := json.Marshal(wire.Lease{Epoch: e.Epoch, Until: until.UTC()})
	if err != nil {
		return fmt.Errorf("notify lease: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+e.Addr+"/v1/lease", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notify lease: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+e.Key)
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = defaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("notify lease to %s: %w", e.Addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("notify lease to %s: %w", e.Addr, wire.ReadHTTPError(resp.StatusCode, b))
	}
	return nil
}
