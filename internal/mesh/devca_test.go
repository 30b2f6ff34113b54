package mesh

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// DevCA writes its CA and leaves private (dir 0700, files 0600), reuses them on the next start, and issues
// a leaf again only once it nears its expiry.
func TestDevCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mesh")
	ca, err := DevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf(regionEU)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := RegionOf(leaf.Leaf); err != nil || r != regionEU {
		t.Fatalf("the leaf names %q, %v", r, err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, %v", fi.Mode().Perm(), err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "eu.crt", "eu.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, %v", f, fi.Mode().Perm(), err)
		}
	}

	// The next start reuses the CA and the leaf.
	again, err := DevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.cert.Equal(ca.cert) {
		t.Fatal("a second start made a new CA")
	}
	leaf2, err := again.Leaf(regionEU)
	if err != nil {
		t.Fatal(err)
	}
	if leaf2.Leaf.SerialNumber.Cmp(leaf.Leaf.SerialNumber) != 0 {
		t.Fatal("a second start issued a new leaf although the old one was fresh")
	}

	// Twenty-one days on, a third of the leaf's thirty days is left: it is issued again, and written.
	later, err := openDevCA(dir, func() time.Time { return time.Now().Add(21 * 24 * time.Hour) }, DevLeafLifetime)
	if err != nil {
		t.Fatal(err)
	}
	leaf3, err := later.Leaf(regionEU)
	if err != nil {
		t.Fatal(err)
	}
	if leaf3.Leaf.SerialNumber.Cmp(leaf.Leaf.SerialNumber) == 0 {
		t.Fatal("a leaf near its expiry was not issued again")
	}
	if leaf4, err := later.Leaf(regionEU); err != nil || leaf4 != leaf3 {
		t.Fatalf("the new leaf is not kept: %v", err)
	}

	// A directory others can read is refused.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := DevCA(dir); err == nil {
		t.Fatal("a CA in a 0755 directory was opened")
	}
	if _, err := ca.Leaf("Not A Region"); err == nil {
		t.Fatal("a leaf for an invalid region was issued")
	}
}
