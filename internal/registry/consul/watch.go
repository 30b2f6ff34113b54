package consul

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/warren-mesh/warren/internal/registry"
)

// cache is a watched Registry's view of the held owner keys, by sandbox id.
type cache struct {
	mu    sync.RWMutex
	index uint64 // Consul index of the listing last applied
	m     map[string]cached
}

type cached struct {
	modify  uint64 // the key's ModifyIndex: an unchanged key is not decoded again
	session string
	e       registry.Entry
}

func newCache() *cache { return &cache{m: map[string]cached{}} }

func (c *cache) get(id string) (registry.Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[id]
	return v.e, ok
}

func (c *cache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// putIfFresh caches what a direct read at Consul index readIndex returned, unless the watch has applied a
// newer listing meanwhile (which knows better, and which the read would otherwise overwrite with something
// older).
func (c *cache) putIfFresh(id string, e registry.Entry, p *api.KVPair, readIndex uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if readIndex >= c.index {
		c.m[id] = cached{modify: p.ModifyIndex, session: p.Session, e: e}
	}
}

// put caches what this Registry has just written itself (write-through): a Lookup right after Register
// must not see an older entry the watch has not replaced yet.
func (c *cache) put(id string, v cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[id] = v
}

// apply replaces the view with a listing of the owners prefix taken at index: held keys only, each decoded
// once per change, malformed ones left out.
func (r *Registry) apply(pairs api.KVPairs, index uint64) {
	c := r.cache
	// The old view is read under the read lock (put and drop change it in place); Lookups go on meanwhile.
	c.mu.RLock()
	old := c.m
	m := make(map[string]cached, len(pairs))
	for _, p := range pairs {
		if p.Session == "" {
			continue
		}
		id := strings.TrimPrefix(p.Key, r.owners)
		if id == p.Key || id == "" || strings.Contains(id, "/") {
			continue
		}
		if v, ok := old[id]; ok && v.modify == p.ModifyIndex && v.session == p.Session {
			m[id] = v
			continue
		}
		e, err := decodeEntry(p.Value)
		if err != nil {
			r.log.Warn("registry: watch skips a malformed owner entry", "sandbox", id, "err", err)
			continue
		}
		if registry.SandboxID(e.Issuer, e.User) != id {
			r.log.Warn("registry: watch skips an owner entry under another user's key", "sandbox", id)
			continue
		}
		m[id] = cached{modify: p.ModifyIndex, session: p.Session, e: e}
	}
	c.mu.RUnlock()
	c.mu.Lock()
	c.m, c.index = m, index
	c.mu.Unlock()
}

// watch keeps the cache current with blocking queries on the owners prefix until ctx ends. While Consul is
// unreachable the cache keeps its last view.
func (r *Registry) watch(ctx context.Context) {
	var index uint64
	backoff := 100 * time.Millisecond
	failing := false
	for {
		pairs, meta, err := r.blockingList(ctx, r.owners, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !failing {
				r.log.Warn("registry: watch owners", "err", err)
				failing = true
			}
			index = 0 // Consul may come back with other indexes: start over with a plain read
			if sleep(ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		if failing {
			r.log.Info("registry: watch owners recovered")
			failing = false
		}
		backoff = 100 * time.Millisecond
		r.apply(pairs, meta.LastIndex)
		index = nextIndex(index, meta.LastIndex)
	}
}

func (r *Registry) blockingList(ctx context.Context, prefix string, index uint64) (api.KVPairs, *api.QueryMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, watchWait+watchWait/16+requestTimeout)
	defer cancel()
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: watchWait}).WithContext(ctx)
	return r.client.KV().List(prefix, q)
}
