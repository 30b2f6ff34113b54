// Package mem is the in-process Registry used by warren dev: a map guarded by a mutex. It holds only what
// one process knows, which is everything when edge and scheduler share the process.
package mem

import (
	"context"
	"fmt"
	"sync"

	"github.com/warren-mesh/warren/internal/registry"
)

type key struct{ iss, sub string }

// Registry is an in-memory registry.Registry.
type Registry struct {
	mu sync.RWMutex
	m  map[key]registry.Entry
}

var _ registry.Registry = (*Registry)(nil)

// New returns an empty registry.
func New() *Registry { return &Registry{m: map[key]registry.Entry{}} }

func (r *Registry) Lookup(_ context.Context, iss, sub string) (registry.Entry, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.m[key{iss, sub}]
	if !ok {
		return registry.Entry{}, registry.ErrNotFound
	}
	return e, nil
}

func (r *Registry) Register(_ context.Context, e registry.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{e.Issuer, e.User}
	if cur, ok := r.m[k]; ok && cur.Epoch > e.Epoch {
		return fmt.Errorf("register %s/%s epoch %d under %d: %w", e.Issuer, e.User, e.Epoch, cur.Epoch, registry.ErrStale)
	}
	r.m[k] = e
	return nil
}

func (r *Registry) Deregister(_ context.Context, iss, sub string, epoch int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{iss, sub}
	if cur, ok := r.m[k]; ok && cur.Epoch == epoch {
		delete(r.m, k)
	}
	return nil
}

// Len is the number of live entries.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.m)
}
