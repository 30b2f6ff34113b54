package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// Mode is how a policy treats a destination no rule names.
type Mode string

// The modes, from the widest to the narrowest.
const (
	// Open lets every destination through but those a deny rule names (today's default).
	Open Mode = "open"
	// Allowlist lets through only what an allow rule names, and not what a deny rule names.
	Allowlist Mode = "allowlist"
	// Closed lets nothing through.
	Closed Mode = "closed"
)

// Protocol is a rule's transport.
type Protocol string

// The protocols a rule may name; a rule without one names both.
const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Bounds of a tenant's policy: what Parse and Validate refuse beyond.
const (
	MaxRules      = 256      // allow and deny rules together
	MaxPorts      = 32       // ports of one rule
	MaxDomainLen  = 253      // a domain's text, "*." included
	MaxPolicySize = 64 << 10 // bytes of a policy's JSON
)

// Rule names destinations: a domain (exact, or "*." and a domain for every name below it, not the domain
// itself) or a CIDR (IPv4 or IPv6), on some ports (none: every port) and a protocol (none: TCP and UDP).
// Exactly one of Domain and CIDR is set.
type Rule struct {
	Domain   string   `json:"domain,omitempty"`
	CIDR     string   `json:"cidr,omitempty"`
	Ports    []int    `json:"ports,omitempty"`
	Protocol Protocol `json:"protocol,omitempty"`

	prefix netip.Prefix // CIDR, parsed by Validate
}

// Policy is one layer of egress policy: an issuer's default, a user's override, or a token's narrowing.
// The operator's hard deny list is not part of it and always wins (Stack).
type Policy struct {
	Mode  Mode   `json:"mode"`
	Allow []Rule `json:"allow,omitempty"`
	Deny  []Rule `json:"deny,omitempty"`
}

// Parse decodes and validates a tenant's policy (JSON, unknown members refused). A refusal is a
// *wire.Error with code invalid_argument whose details.field names the member at fault.
func Parse(b []byte) (*Policy, error) {
	if len(b) > MaxPolicySize {
		return nil, wire.Errorf(wire.PayloadTooLarge, "egress policy: %d bytes, at most %d", len(b), MaxPolicySize)
	}
	var p Policy
	if err := strictjson.Unmarshal(b, &p, strictjson.RejectUnknown); err != nil {
		return nil, wire.JSONError(err, "egress policy")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks p against the rules of Parse, normalises its domains (lower case, no trailing dot) and
// its CIDRs (masked), and readies it for evaluation. It must be called before p is evaluated.
func (p *Policy) Validate() error {
	switch p.Mode {
	case Open, Allowlist, Closed:
	default:
		return invalid("/mode", "egress policy: mode %q is none of open, allowlist, closed", clip(string(p.Mode)))
	}
	if n := len(p.Allow) + len(p.Deny); n > MaxRules {
		return invalid("/allow", "egress policy: %d rules, at most %d", n, MaxRules)
	}
	for i := range p.Allow {
		if err := p.Allow[i].validate(fmt.Sprintf("/allow/%d", i)); err != nil {
			return err
		}
	}
	for i := range p.Deny {
		if err := p.Deny[i].validate(fmt.Sprintf("/deny/%d", i)); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rule) validate(at string) error {
	switch {
	case r.Domain != "" && r.CIDR != "":
		return invalid(at, "egress policy: rule %s names both a domain and a cidr", at)
	case r.Domain == "" && r.CIDR == "":
		return invalid(at, "egress policy: rule %s names neither a domain nor a cidr", at)
	case r.Domain != "":
		d, err := normalDomain(r.Domain, true)
		if err != nil {
			return invalid(at+"/domain", "egress policy: rule %s: %v", at, err)
		}
		r.Domain = d
	default:
		pfx, err := netip.ParsePrefix(r.CIDR)
		if err != nil || pfx.Addr().Zone() != "" {
			return invalid(at+"/cidr", "egress policy: rule %s: cidr %q is not an address/bits prefix", at, clip(r.CIDR))
		}
		r.prefix = pfx.Masked()
		r.CIDR = r.prefix.String()
	}
	if len(r.Ports) > MaxPorts {
		return invalid(at+"/ports", "egress policy: rule %s: %d ports, at most %d", at, len(r.Ports), MaxPorts)
	}
	for j, port := range r.Ports {
		if port < 1 || port > 65535 {
			return invalid(fmt.Sprintf("%s/ports/%d", at, j), "egress policy: rule %s: port %d out of 1-65535", at, port)
		}
	}
	switch r.Protocol {
	case "", TCP, UDP:
	default:
		return invalid(at+"/protocol", "egress policy: rule %s: protocol %q is neither tcp nor udp", at, clip(string(r.Protocol)))
	}
	return nil
}

// normalDomain lower-cases name and drops one trailing dot, and refuses what is not a host name: empty or
// too long, an empty label or one over 63 bytes, a byte other than a letter, digit, '-' or '_', an
// address literal. With wildcard, a leading "*." is kept; no other '*' is a letter.
func normalDomain(name string, wildcard bool) (string, error) {
	d := strings.ToLower(strings.TrimSuffix(name, "."))
	if len(d) == 0 || len(d) > MaxDomainLen {
		return "", fmt.Errorf("domain of %d bytes, 1 to %d", len(d), MaxDomainLen)
	}
	rest := d
	if wildcard {
		rest = strings.TrimPrefix(d, "*.")
	}
	if _, err := netip.ParseAddr(rest); err == nil {
		return "", fmt.Errorf("domain %q is an address: use cidr", clip(name))
	}
	for label := range strings.SplitSeq(rest, ".") {
		if len(label) == 0 || len(label) > 63 {
			return "", fmt.Errorf("domain %q has a label of %d bytes, 1 to 63", clip(name), len(label))
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("domain %q holds %q: letters, digits, '-' and '_' only, '*.' first", clip(name), string(rune(c)))
			}
		}
	}
	return d, nil
}

// NormalName is the form of a host name the gateway compares (lower case, no trailing dot), and false
// for what is not a host name (an address literal included).
func NormalName(name string) (string, bool) {
	d, err := normalDomain(name, false)
	return d, err == nil
}

func invalid(field, format string, args ...any) *wire.Error {
	return wire.Errorf(wire.InvalidArgument, format, args...).WithDetails(map[string]any{"field": field})
}

// clip bounds what of a tenant's text goes back into an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Request is one destination the sandbox asks for. Name is what the sandbox named (a DNS query, a TLS
// SNI, an HTTP Host; "" when it named nothing); Addr is the address it connects to (invalid for a DNS
// query). Names are the allowed names Addr was obtained from through the gateway's resolver.
type Request struct {
	Name     string
	Names    []string
	Addr     netip.Addr
	Port     int
	Protocol Protocol
}

// matches reports whether r names the request's destination: a domain rule by Name or one of Names, a
// CIDR rule by Addr; and its ports and protocol.
func (r *Rule) matches(q Request) bool {
	if r.Protocol != "" && q.Protocol != "" && r.Protocol != q.Protocol {
		return false
	}
	if len(r.Ports) > 0 && q.Port != 0 && !slices.Contains(r.Ports, q.Port) {
		return false
	}
	if r.Domain != "" {
		if q.Name != "" && domainMatch(r.Domain, q.Name) {
			return true
		}
		return slices.ContainsFunc(q.Names, func(n string) bool { return domainMatch(r.Domain, n) })
	}
	return q.Addr.IsValid() && (r.prefix.Contains(q.Addr) || r.prefix.Contains(q.Addr.Unmap()))
}

// domainMatch reports whether pattern (normalised) names name (normalised).
func domainMatch(pattern, name string) bool {
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return pattern == name
}

// allows reports whether p lets q through, and why not.
func (p *Policy) allows(q Request) (bool, string) {
	for i := range p.Deny {
		if p.Deny[i].matches(q) {
			return false, "denied by rule"
		}
	}
	switch p.Mode {
	case Open:
		return true, ""
	case Allowlist:
		for i := range p.Allow {
			if p.Allow[i].matches(q) {
				return true, ""
			}
		}
		return false, "not on the allowlist"
	default:
		return false, "egress closed"
	}
}
