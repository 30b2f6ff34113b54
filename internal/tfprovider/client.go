package tfprovider

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/warren-mesh/warren/billing/adminclient"
	warren "github.com/warren-mesh/warren/sdk"
)

// requestTimeout bounds one call to the billing API or the edge; Terraform's own cancellation (Ctrl-C)
// ends it sooner.
const requestTimeout = adminclient.DefaultTimeout

// client calls the billing API (docs/PROTOCOL.md#billing-api) with an admin key, as `warren admin` does,
// through the one typed client (billing/adminclient: its timeout, answer bound and request ids), and an
// edge for GET /v1/regions.
type client struct {
	*adminclient.Client
	edge *warren.Client // the Go SDK's client: no token needed there
}

// checkBaseURL checks a base URL from the provider's configuration.
func checkBaseURL(name, s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%s %q: want http(s)://host[:port][/prefix]", name, s)
	}
	return strings.TrimRight(s, "/"), nil
}

func (c *client) regions(ctx context.Context) (warren.Regions, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return c.edge.Regions(ctx)
}
