package billing

import "net/http"

// Authenticate checks a request's admin key as every billing API route does (constant time, counted in
// warren_billing_api_auth_failures_total), for other admin APIs served beside it: the workspace templates'
// (runner/templates).
func (a *API) Authenticate(r *http.Request) error { return a.authenticate(r) }
