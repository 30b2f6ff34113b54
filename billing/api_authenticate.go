package billing

import (
	"net/http"

	"github.com/warren-mesh/warren/internal/wire"
)

// Authenticate checks a request's admin key as every billing API route does (constant time, counted in
// warren_billing_api_auth_failures_total), for other admin APIs served beside it: the workspace templates'
// (runner/templates).
// Only the admin key passes: an issuer's API key is permission_denied there.
func (a *API) Authenticate(r *http.Request) error {
	iss, err := a.authenticate(r)
	if err != nil {
		return err
	}
	if iss != "" {
		return wire.Errorf(wire.PermissionDenied, "the API key of issuer %s may not call this route: it needs the admin key", iss)
	}
	return nil
}
