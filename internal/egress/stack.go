package egress

import (
	"net/netip"
	"slices"

	"github.com/warren-mesh/warren/internal/netdeny"
)

// Decision is the verdict on one Request.
type Decision struct {
	Allowed bool
	// Reason says why a request was refused: "hard deny" (the operator's list), "denied by rule", "not on
	// the allowlist", "egress closed"; "" when allowed.
	Reason string
}

// The reasons of a refusal by policy (the gateway adds its own: see Record.Reason).
const (
	ReasonHardDeny = "hard deny"
)

// HardDeny is the operator's list of destinations no tenant policy opens: internal/netdeny's, the host's
// own addresses, and any further ranges, minus the ranges the operator opened (-egress-allow, a package
// mirror say). Its zero value is netdeny's list alone.
type HardDeny struct {
	// Extra are refused too (the host's own addresses).
	Extra []netip.Prefix
	// Open are let through although netdeny refuses them; Extra still wins.
	Open []netip.Prefix
}

// Denied reports whether a is refused whatever the tenant's policy says. An invalid address is refused.
func (h HardDeny) Denied(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.WithZone("")
	in := func(p netip.Prefix) bool { return p.Contains(a) || p.Contains(a.Unmap()) }
	if slices.ContainsFunc(h.Extra, in) {
		return true
	}
	return netdeny.Denied(a) && !slices.ContainsFunc(h.Open, in)
}

// Stack is the policy in force for one sandbox: the issuer's default or the user's override (the user's
// wins when set), then the layers that narrow it (a token's claims). A request goes through only if the
// operator's hard deny list lets its address through and every layer allows it, so a layer can narrow the
// stack but never widen it. A Stack is immutable once built; it is safe for concurrent use.
type Stack struct {
	hard   HardDeny
	layers []*Policy
}

// DefaultPolicy is the policy of a sandbox whose issuer and user set none: today's open egress.
var DefaultPolicy = Policy{Mode: Open}

// NewStack builds the policy in force from the operator's hard deny list, the issuer's default and the
// user's override (either nil when not set) and the narrowing layers (nil ones skipped). Every policy
// must have been validated (Parse or Validate).
func NewStack(hard HardDeny, issuer, user *Policy, narrow ...*Policy) *Stack {
	base := &DefaultPolicy
	switch {
	case user != nil:
		base = user
	case issuer != nil:
		base = issuer
	}
	s := &Stack{hard: hard, layers: []*Policy{base}}
	for _, p := range narrow {
		if p != nil {
			s.layers = append(s.layers, p)
		}
	}
	return s
}

// Layers returns the policies in force, the base first (for GET /v1/me). They must not be changed.
func (s *Stack) Layers() []*Policy { return slices.Clone(s.layers) }

// Mode is the narrowest mode of the layers.
func (s *Stack) Mode() Mode {
	m := Open
	for _, p := range s.layers {
		if p.Mode == Closed || p.Mode == Allowlist && m == Open {
			m = p.Mode
		}
	}
	return m
}

// HardDenied reports whether the operator's list refuses a.
func (s *Stack) HardDenied(a netip.Addr) bool { return s.hard.Denied(a) }

// Decide judges q: the hard deny list on its address (when it has one), then every layer.
func (s *Stack) Decide(q Request) Decision {
	if q.Addr.IsValid() && s.hard.Denied(q.Addr) {
		return Decision{Reason: ReasonHardDeny}
	}
	for _, p := range s.layers {
		if ok, why := p.allows(q); !ok {
			return Decision{Reason: why}
		}
	}
	return Decision{Allowed: true}
}

// DeniedName returns why a deny rule of some layer names name (a name a DNS answer's chain goes
// through: only deny rules, as such a name is on no allowlist), or "".
func (s *Stack) DeniedName(name string) string {
	q := Request{Name: name}
	for _, p := range s.layers {
		for i := range p.Deny {
			if p.Deny[i].matches(q) {
				return "denied by rule"
			}
		}
	}
	return ""
}
