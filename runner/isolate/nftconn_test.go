package isolate

import (
	"net/netip"
	"testing"

	"github.com/warren-mesh/warren/internal/netdeny"
)

// TestFilterWithManyRulesInstalls installs the egress filter with 3,000 opened ranges (an operator's long
// -egress-allow list) in one flush: the kernel acknowledges every rule before the first answer is read, and
// with the default netlink receive buffer the flush failed with ENOBUFS ("no buffer space available") — as
// the ~70-rule filter did now and then under load, failing sandbox starts; and a batch larger than the
// socket's send buffer (wmem_default, ~208 KiB) was refused whole with EMSGSIZE ("message too long"), as
// sandbox starts in CI were.
func TestFilterWithManyRulesInstalls(t *testing.T) {
	requireRoot(t)
	ns, err := newNetns()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var allow []netip.Prefix
	for i := range 3000 {
		allow = append(allow, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(i >> 8), byte(i)}), 32))
	}
	if err := installFilter(int(ns.Fd()), netdeny.Prefixes(), allow); err != nil {
		t.Fatalf("install a filter of %d rules: %v", len(allow)+len(netdeny.Prefixes()), err)
	}
}
