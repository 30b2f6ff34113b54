package isolate_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/warren-mesh/warren/internal/netdeny"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/isolate/isolatetest"
)

// TestEgressFilterRefusesWhatWebhooksRefuse: the filter a sandbox's network installs (its sets read back
// from the kernel) holds the operator's opened range, then netdeny's list and the host's own addresses,
// merged into ranges that begin and end inside them; and for every address at the edges of each denied
// range (which also finds a gap a merge filled), its IPv6 forms and public ones, the filter refuses
// exactly what the task webhook checker refuses. The opened range passes the filter.
func TestEgressFilterRefusesWhatWebhooksRefuse(t *testing.T) {
	isolate.RequireRoot(t)
	opened := netip.MustParsePrefix("10.1.0.0/16") // a package mirror, say
	n, err := isolate.NewNetwork(isolate.NetworkConfig{
		Nsenter: isolatetest.Tool(t, "nsenter", "util-linux"), Allow: []netip.Prefix{opened},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	rules, err := isolate.InstalledFilter(n)
	if err != nil {
		t.Fatal(err)
	}
	host, err := isolate.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var accepted, rejected []isolate.FilterRange
	for _, r := range rules {
		if r.Reject {
			rejected = append(rejected, r)
		} else {
			accepted = append(accepted, r)
		}
	}
	if len(rules) == 0 || rules[0].Reject || len(accepted) != 1 ||
		accepted[0].First != opened.Addr() || accepted[0].Last != isolate.LastAddr(opened) {
		t.Fatalf("the opened range is not the filter's first and only accepted destination: %v", rules)
	}
	want := append(netdeny.Prefixes(), host...)
	for _, p := range want {
		if !slices.ContainsFunc(rejected, func(r isolate.FilterRange) bool {
			return r.Contains(p.Masked().Addr()) && r.Contains(isolate.LastAddr(p))
		}) {
			t.Errorf("%s is not refused by the filter", p)
		}
	}
	inWant := func(a netip.Addr) bool {
		return slices.ContainsFunc(want, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	for _, r := range rejected {
		if !inWant(r.First) || !inWant(r.Last) {
			t.Errorf("the filter refuses %s to %s, in neither the deny list nor the host's addresses", r.First, r.Last)
		}
	}

	refuses := func(a netip.Addr) bool {
		for _, r := range rules {
			if r.Contains(a) {
				return r.Reject
			}
		}
		return false
	}
	hostOnly := func(a netip.Addr) bool {
		return !netdeny.Denied(a) && slices.ContainsFunc(host, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	for _, a := range addressesAround(netdeny.Prefixes()) {
		if opened.Contains(a) || hostOnly(a) {
			continue
		}
		h := a.String()
		if a.Is6() {
			h = "[" + h + "]"
		}
		_, err := runner.CheckWebhookURL("https://"+h+"/hook", false)
		if webhook := err != nil; refuses(a) != webhook {
			t.Errorf("%s: the filter refuses %v, the webhook checker %v (%v)", a, refuses(a), webhook, err)
		}
	}
	if a := netip.MustParseAddr("10.1.2.3"); refuses(a) {
		t.Errorf("the opened %s is refused", a)
	}
}

// addressesAround are the first and last addresses of each prefix and their neighbours outside it, the IPv6
// forms of the IPv4 ones, and a few public addresses.
func addressesAround(ps []netip.Prefix) []netip.Addr {
	out := []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("2606:4700::1"),
		netip.MustParseAddr("64:ff9b::808:808"), netip.MustParseAddr("::ffff:8.8.8.8")}
	for _, p := range ps {
		first, last := p.Masked().Addr(), isolate.LastAddr(p)
		out = append(out, first, last)
		if b := first.Prev(); b.IsValid() {
			out = append(out, b)
		}
		if b := last.Next(); b.IsValid() {
			out = append(out, b)
		}
		if first.Is4() {
			for _, f := range []string{"::ffff:", "64:ff9b::", "::"} {
				out = append(out, netip.MustParseAddr(f+first.String()), netip.MustParseAddr(f+last.String()))
			}
			out = append(out, sixToFour(first), sixToFour(last))
		}
	}
	return out
}

// sixToFour is the 6to4 address of host 1 behind the IPv4 address a.
func sixToFour(a netip.Addr) netip.Addr {
	b := [16]byte{0x20, 0x02}
	v4 := a.As4()
	copy(b[2:6], v4[:])
	b[15] = 1
	return netip.AddrFrom16(b)
}
