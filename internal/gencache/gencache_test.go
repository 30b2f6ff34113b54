package gencache

import (
	"testing"
	"time"
)

func TestBoundsAndGenerations(t *testing.T) {
	c := &Cache[int, string]{TTL: time.Second, MaxEntries: 4, MaxBytes: 20}
	now := time.Unix(1000, 0)
	c.Put(1, "a", 3, now)
	c.Put(2, "b", 3, now) // 2 entries, 6 bytes: the generation is full by count
	c.Put(3, "c", 1, now)
	if _, ok := c.Get(3, now); ok || c.Len() != 2 {
		t.Fatalf("a key past the count bound was kept (%d entries)", c.Len())
	}
	c.Put(1, "a2", 3, now) // a kept key is replaced even when full
	if v, _ := c.Get(1, now); v != "a2" {
		t.Fatalf("got %q, want the replaced a2", v)
	}

	later := now.Add(1500 * time.Millisecond) // one swap: 1 and 2 are in the older generation
	c.Put(4, "d", 4, later)
	c.Put(5, "e", 7, later) // 11 bytes > 20/2: refused by the byte bound
	if _, ok := c.Get(5, later); ok {
		t.Fatal("a key past the byte bound was kept")
	}
	if v, ok := c.Get(1, later); !ok || v != "a2" {
		t.Fatal("the older generation is not read")
	}
	if c.Update(1, later, func(string) string { return "x" }) {
		t.Fatal("Update changed an entry of the older generation")
	}
	c.UpdateAll(1, func(string) string { return "y" })
	if v, _ := c.Get(1, later); v != "y" {
		t.Fatalf("UpdateAll left %q", v)
	}
	if !c.Update(4, later, func(string) string { return "d2" }) {
		t.Fatal("Update missed an entry of the current generation")
	}
	c.Get(0, later.Add(3*time.Second)) // two TTLs without use: both generations dropped
	if c.Len() != 0 {
		t.Fatalf("%d entries outlived two TTLs", c.Len())
	}
}
