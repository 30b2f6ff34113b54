package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

func mustParse(t testing.TB, s string) *Policy {
	t.Helper()
	p, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return p
}

func TestParseRefuses(t *testing.T) {
	many := `{"mode":"allowlist","allow":[` + strings.Repeat(`{"domain":"a.com"},`, MaxRules) + `{"domain":"b.com"}]}`
	for _, c := range []struct {
		name, in, field string
		code            wire.Code
	}{
		{"not json", `{`, "", wire.InvalidArgument},
		{"unknown member", `{"mode":"open","allowed":[]}`, "/allowed", wire.InvalidArgument},
		{"bad mode", `{"mode":"wide"}`, "/mode", wire.InvalidArgument},
		{"no mode", `{}`, "/mode", wire.InvalidArgument},
		{"both", `{"mode":"allowlist","allow":[{"domain":"a.com","cidr":"1.2.3.0/24"}]}`, "/allow/0", wire.InvalidArgument},
		{"neither", `{"mode":"allowlist","allow":[{"ports":[443]}]}`, "/allow/0", wire.InvalidArgument},
		{"empty label", `{"mode":"open","deny":[{"domain":"a..com"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"long label", `{"mode":"open","deny":[{"domain":"` + strings.Repeat("a", 64) + `.com"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"long domain", `{"mode":"open","deny":[{"domain":"` + strings.Repeat("a.", 127) + `com"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"inner star", `{"mode":"open","deny":[{"domain":"a.*.com"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"bare star", `{"mode":"open","deny":[{"domain":"*"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"address as domain", `{"mode":"open","deny":[{"domain":"10.0.0.1"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"v6 address as domain", `{"mode":"open","deny":[{"domain":"::1"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"non ascii", `{"mode":"open","deny":[{"domain":"exämple.com"}]}`, "/deny/0/domain", wire.InvalidArgument},
		{"bad cidr", `{"mode":"open","deny":[{"cidr":"10.0.0.0/33"}]}`, "/deny/0/cidr", wire.InvalidArgument},
		{"cidr zone", `{"mode":"open","deny":[{"cidr":"fe80::%eth0/64"}]}`, "/deny/0/cidr", wire.InvalidArgument},
		{"port 0", `{"mode":"open","deny":[{"cidr":"10.0.0.0/8","ports":[0]}]}`, "/deny/0/ports/0", wire.InvalidArgument},
		{"port high", `{"mode":"open","deny":[{"cidr":"10.0.0.0/8","ports":[443,65536]}]}`, "/deny/0/ports/1", wire.InvalidArgument},
		{"protocol", `{"mode":"open","deny":[{"cidr":"10.0.0.0/8","protocol":"sctp"}]}`, "/deny/0/protocol", wire.InvalidArgument},
		{"too many rules", many, "/allow", wire.InvalidArgument},
		{"too large", `{"mode":"open","x":"` + strings.Repeat("a", MaxPolicySize) + `"}`, "", wire.PayloadTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse([]byte(c.in))
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("Parse = %v, %v; want a *wire.Error", p, err)
			}
			if we.Code != c.code {
				t.Errorf("code %s, want %s (%v)", we.Code, c.code, err)
			}
			if c.field != "" && we.Details["field"] != c.field {
				t.Errorf("field %v, want %s (%v)", we.Details["field"], c.field, err)
			}
		})
	}
}

func TestParseNormalises(t *testing.T) {
	p := mustParse(t, `{"mode":"allowlist","allow":[{"domain":"*.GitHub.com."},{"cidr":"203.0.113.7/24","ports":[443],"protocol":"tcp"}]}`)
	if p.Allow[0].Domain != "*.github.com" || p.Allow[1].CIDR != "203.0.113.0/24" {
		t.Fatalf("normalised to %+v", p.Allow)
	}
}

func TestPolicyMatches(t *testing.T) {
	public := netip.MustParseAddr("8.8.8.8")
	p := mustParse(t, `{"mode":"allowlist","allow":[
		{"domain":"github.com","ports":[443,22]},
		{"domain":"*.npmjs.org","protocol":"tcp"},
		{"cidr":"1.1.1.0/24","ports":[53],"protocol":"udp"},
		{"cidr":"2606:4700::/32"}],
		"deny":[{"domain":"evil.npmjs.org"}]}`)
	s := NewStack(HardDeny{}, p, nil)
	for _, c := range []struct {
		name string
		q    Request
		want bool
	}{
		{"exact", Request{Name: "github.com", Port: 443, Protocol: TCP}, true},
		{"exact other port", Request{Name: "github.com", Port: 80, Protocol: TCP}, false},
		{"exact dns (no port)", Request{Name: "github.com"}, true},
		{"exact is not wildcard", Request{Name: "api.github.com", Port: 443}, false},
		{"suffix is not a subdomain", Request{Name: "evilgithub.com", Port: 443}, false},
		{"wildcard", Request{Name: "registry.npmjs.org", Port: 443, Protocol: TCP}, true},
		{"wildcard deep", Request{Name: "a.b.npmjs.org", Port: 8080, Protocol: TCP}, true},
		{"wildcard not apex", Request{Name: "npmjs.org", Port: 443}, false},
		{"wildcard udp", Request{Name: "registry.npmjs.org", Port: 443, Protocol: UDP}, false},
		{"deny wins", Request{Name: "evil.npmjs.org", Port: 443, Protocol: TCP}, false},
		{"deny by names", Request{Names: []string{"evil.npmjs.org"}, Addr: public, Port: 443, Protocol: TCP}, false},
		{"names from dns", Request{Names: []string{"github.com"}, Addr: public, Port: 22, Protocol: TCP}, true},
		{"cidr", Request{Addr: netip.MustParseAddr("1.1.1.1"), Port: 53, Protocol: UDP}, true},
		{"cidr mapped", Request{Addr: netip.MustParseAddr("::ffff:1.1.1.1"), Port: 53, Protocol: UDP}, true},
		{"cidr tcp", Request{Addr: netip.MustParseAddr("1.1.1.1"), Port: 53, Protocol: TCP}, false},
		{"cidr v6", Request{Addr: netip.MustParseAddr("2606:4700::1111"), Port: 443, Protocol: UDP}, true},
		{"bare address", Request{Addr: public, Port: 443, Protocol: TCP}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if d := s.Decide(c.q); d.Allowed != c.want {
				t.Errorf("Decide(%+v) = %+v, want allowed %v", c.q, d, c.want)
			}
		})
	}
}

// TestStackNarrowsNeverWidens: a user's override replaces the issuer's default, and a token's layer only
// narrows: a token asking for open egress under an allowlist, or for a domain the allowlist lacks, gets
// nothing more.
func TestStackNarrowsNeverWidens(t *testing.T) {
	issuer := mustParse(t, `{"mode":"allowlist","allow":[{"domain":"a.com"},{"domain":"b.com"}]}`)
	user := mustParse(t, `{"mode":"allowlist","allow":[{"domain":"a.com"},{"domain":"c.com"}]}`)
	wide := mustParse(t, `{"mode":"open"}`)
	token := mustParse(t, `{"mode":"allowlist","allow":[{"domain":"c.com"},{"domain":"d.com"}]}`)
	allowed := func(s *Stack, name string) bool {
		return s.Decide(Request{Name: name, Port: 443, Protocol: TCP}).Allowed
	}

	s := NewStack(HardDeny{}, issuer, nil)
	if !allowed(s, "b.com") || allowed(s, "c.com") {
		t.Error("issuer default not in force")
	}
	s = NewStack(HardDeny{}, issuer, user)
	if allowed(s, "b.com") || !allowed(s, "c.com") {
		t.Error("user override not in force")
	}
	s = NewStack(HardDeny{}, issuer, user, wide)
	if allowed(s, "d.com") || allowed(s, "b.com") || s.Mode() != Allowlist {
		t.Error("an open token layer widened the allowlist")
	}
	s = NewStack(HardDeny{}, issuer, user, token)
	if allowed(s, "a.com") || !allowed(s, "c.com") || allowed(s, "d.com") {
		t.Error("token layer is not the intersection")
	}
	s = NewStack(HardDeny{}, nil, nil, mustParse(t, `{"mode":"closed"}`))
	if allowed(s, "a.com") || s.Mode() != Closed {
		t.Error("closed token layer let a request through")
	}
	if s := NewStack(HardDeny{}, nil, nil); !allowed(s, "anything.example") || s.Mode() != Open {
		t.Error("default is not open")
	}
}

// TestHardDenyWins: no tenant rule opens the operator's list, IPv6 forms of a denied IPv4 address
// included; the operator's own opening does, and the host's addresses stay refused.
func TestHardDenyWins(t *testing.T) {
	p := mustParse(t, `{"mode":"allowlist","allow":[{"cidr":"0.0.0.0/0"},{"cidr":"::/0"},{"domain":"metadata.example"}]}`)
	s := NewStack(HardDeny{}, p, nil)
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:7f00:1::1", "fe80::1%eth0", "fd00::1", "100.64.0.1"} {
		d := s.Decide(Request{Name: "metadata.example", Addr: netip.MustParseAddr(a), Port: 80, Protocol: TCP})
		if d.Allowed || d.Reason != ReasonHardDeny {
			t.Errorf("%s: %+v, want refused by the hard deny list", a, d)
		}
	}
	if !s.Decide(Request{Addr: netip.MustParseAddr("8.8.8.8"), Port: 80, Protocol: TCP}).Allowed {
		t.Error("public address refused")
	}
	mirror := netip.MustParsePrefix("10.9.0.0/16")
	host := netip.MustParsePrefix("10.9.0.1/32")
	s = NewStack(HardDeny{Open: []netip.Prefix{mirror}, Extra: []netip.Prefix{host}}, p, nil)
	if !s.Decide(Request{Addr: netip.MustParseAddr("10.9.3.3"), Port: 80, Protocol: TCP}).Allowed {
		t.Error("operator's opened range refused")
	}
	if s.Decide(Request{Addr: netip.MustParseAddr("10.9.0.1"), Port: 80, Protocol: TCP}).Allowed {
		t.Error("host address let through")
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(`{"mode":"allowlist","allow":[{"domain":"*.github.com","ports":[443]},{"cidr":"2606:4700::/32","protocol":"udp"}],"deny":[{"domain":"x.github.com"}]}`))
	f.Add([]byte(`{"mode":"open"}`))
	f.Add([]byte(`{"mode":"closed","deny":[{"cidr":"::ffff:10.0.0.0/104"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			if wire.CodeOf(err) != wire.InvalidArgument && wire.CodeOf(err) != wire.PayloadTooLarge {
				t.Fatalf("refusal with code %s: %v", wire.CodeOf(err), err)
			}
			return
		}
		// What was accepted is normal: validating it again changes nothing, and it decides without panic.
		again := *p
		if err := again.Validate(); err != nil {
			t.Fatalf("accepted policy fails validation again: %v", err)
		}
		for _, r := range append(append([]Rule(nil), p.Allow...), p.Deny...) {
			if r.Domain != "" {
				if d, err := normalDomain(r.Domain, true); err != nil || d != r.Domain {
					t.Fatalf("domain %q not normal (%q, %v)", r.Domain, d, err)
				}
			}
		}
		s := NewStack(HardDeny{}, p, nil)
		s.Decide(Request{Name: "a.example.com", Addr: netip.MustParseAddr("8.8.8.8"), Port: 443, Protocol: TCP})
		if p.Mode == Closed && s.Decide(Request{Name: "x.com"}).Allowed {
			t.Fatal("closed policy allowed a name")
		}
	})
}
