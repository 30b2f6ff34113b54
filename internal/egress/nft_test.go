package egress

import (
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
)

func tables(t *testing.T, nsFd int) []string {
	t.Helper()
	c, err := conn(nsFd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range ts {
		names = append(names, tb.Name)
	}
	return names
}

// TestRedirectInstallRemove: Install replaces a table of the same name (a crashed runner's), Remove
// deletes it and is not an error when it is gone; a bad name is refused before touching the kernel.
func TestRedirectInstallRemove(t *testing.T) {
	requireRoot(t)
	name := "egt" + strings.ToLower(rand.Text()[:6])
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ns, err := os.Open("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	fd := int(ns.Fd())
	r := Redirect{Table: "egw-x", Iface: "wvn0", Ports: Ports{DNSUDP: 1053, DNSTCP: 1053, Proxy4: 1080, Proxy6: 1081}}
	for range 2 {
		if err := r.Install(fd); err != nil {
			t.Fatal(err)
		}
	}
	if got := tables(t, fd); !slices.Equal(got, []string{"egw-x"}) {
		t.Fatalf("tables after two installs: %v", got)
	}
	for range 2 {
		if err := r.Remove(fd); err != nil {
			t.Fatal(err)
		}
	}
	if got := tables(t, fd); len(got) != 0 {
		t.Fatalf("tables after remove: %v", got)
	}
	bad := Redirect{Table: "x", Iface: strings.Repeat("i", 16)}
	if err := bad.Install(fd); !errors.Is(err, ErrConfig) {
		t.Fatalf("interface name of 16 bytes: %v", err)
	}
}
