package consul

import "github.com/warren-mesh/warren/internal/registry"

// StopRenewing plays a runner that hangs: the lease stops renewing its session and check, but keeps
// watching its key.
func (l *Lease) StopRenewing() { l.stopRenewing() }

// Session is the lease's Consul session ID.
func (l *Lease) Session() string { return l.session }

// Cached reports what the watch cache holds for (issuer, user).
func (r *Registry) Cached(issuer, user string) (registry.Entry, bool) {
	id, _ := r.key(issuer, user)
	return r.cache.get(id)
}

// Poison puts e into the watch cache as if the watch had seen it.
func (r *Registry) Poison(e registry.Entry) {
	id, _ := r.key(e.Issuer, e.User)
	r.cache.put(id, cached{e: e})
}
