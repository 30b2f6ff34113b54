package egress

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// names remembers which allowed names the gateway's resolver answered with which addresses, until the
// answers expire: under an allowlist, an address the sandbox did not obtain from an allowed name is
// refused, and a TLS SNI or HTTP Host must be a name its connection's address came from. It holds at most
// max pairs; when full and nothing has expired, a new answer is not remembered (its connections are then
// refused: the bound fails closed).
type names struct {
	max int
	mu  sync.Mutex
	// by, last and n are guarded by mu: the expiry of each (address, name) pair, the latest expiry of
	// each name's pairs, and the number of pairs.
	by   map[netip.Addr]map[string]time.Time
	last map[string]time.Time
	n    int
}

func newNames(max int) *names {
	return &names{max: max, by: make(map[netip.Addr]map[string]time.Time), last: make(map[string]time.Time)}
}

// add remembers that name answered a until expires; false when the table was full.
func (t *names) add(now time.Time, name string, a netip.Addr, expires time.Time) bool {
	a = a.Unmap()
	t.mu.Lock()
	defer t.mu.Unlock()
	if expires.After(t.last[name]) {
		t.last[name] = expires
	}
	if m, ok := t.by[a]; ok {
		if old, ok := m[name]; ok {
			if expires.After(old) {
				m[name] = expires
			}
			return true
		}
	}
	if t.n >= t.max {
		t.sweepLocked(now)
		if t.n >= t.max {
			return false
		}
	}
	m := t.by[a]
	if m == nil {
		m = make(map[string]time.Time)
		t.by[a] = m
	}
	m[name] = expires
	t.n++
	return true
}

// lookup returns the names a was obtained from that have not expired, sorted.
func (t *names) lookup(now time.Time, a netip.Addr) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, exp := range t.by[a.Unmap()] {
		if now.Before(exp) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// known reports whether the resolver answered name with addresses that have not all expired.
func (t *names) known(now time.Time, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return now.Before(t.last[name])
}

func (t *names) sweepLocked(now time.Time) {
	for name, exp := range t.last {
		if !now.Before(exp) {
			delete(t.last, name)
		}
	}
	for a, m := range t.by {
		for name, exp := range m {
			if !now.Before(exp) {
				delete(m, name)
				t.n--
			}
		}
		if len(m) == 0 {
			delete(t.by, a)
		}
	}
}
