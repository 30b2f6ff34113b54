package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
)

func TestParseLevels(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"", nil, true},
		{"10", []int{10}, true},
		{"10, 100,1000", []int{10, 100, 1000}, true},
		{"100,10", nil, false},
		{"10,10", nil, false},
		{"0", nil, false},
		{"ten", nil, false},
	} {
		got, err := parseLevels(c.in)
		if (err == nil) != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("parseLevels(%q) = %v, %v", c.in, got, err)
		}
	}
}

// TestTreesPSSCountsDescendants: a process tree's PSS is its root's and its children's.
func TestTreesPSSCountsDescendants(t *testing.T) {
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	self, kid := strconv.Itoa(os.Getpid()), strconv.Itoa(child.Process.Pid)
	_, procs, err := treesPSSKiB([]string{self})
	if err != nil {
		t.Fatal(err)
	}
	if procs < 2 {
		t.Fatalf("the tree of this process and its child: %d processes", procs)
	}
	alone, err := pssKiB(kid)
	if err != nil {
		t.Fatal(err)
	}
	kib, procs, err := treesPSSKiB([]string{kid})
	// PSS moves between two reads as other processes map or drop the pages the child shares (sleep's libc):
	// the tree's figure is the child's own, give or take that.
	if diff := kib - alone; err != nil || procs != 1 || kib <= 0 || diff < -alone/10-16 || diff > alone/10+16 {
		t.Fatalf("the child's tree: %d processes, %d KiB (%v); its own PSS %d KiB", procs, kib, err, alone)
	}
}
