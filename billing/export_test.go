package billing

// Routes lists the API's routes as "METHOD /pattern", for the OpenAPI test.
func Routes() []string {
	out := make([]string, len(routes))
	for i, rt := range routes {
		out[i] = rt.method + " " + rt.pattern
	}
	return out
}

// ScopedRoutes lists the routes an issuer's API key may call, as Routes does.
func ScopedRoutes() map[string]bool {
	out := map[string]bool{}
	for _, rt := range routes {
		out[rt.method+" "+rt.pattern] = rt.scoped
	}
	return out
}
