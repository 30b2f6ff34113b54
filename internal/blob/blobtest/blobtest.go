// Package blobtest is the contract suite of the BlobStore port: every blob.Store adapter runs Run against
// itself (the embedded one always, production ones against a real server), so code written against
// blob.Store may rely on exactly what the suite checks.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
)

// Option adjusts Run to a test server's known limitation (never to an adapter's).
type Option func(*options)

type options struct {
	nestedKeysUnsupported string
}

// ServerLacksNestedKeys is for S3-compatible test servers that store objects as files (versitygw's posix
// backend, MinIO on a file system): they cannot hold "a" and "a/b" at once, which S3 itself and the port
// allow. The part of NestedKeys such a server can pass still runs; the rest is skipped with reason.
func ServerLacksNestedKeys(reason string) Option {
	return func(o *options) { o.nestedKeysUnsupported = reason }
}

// Run runs the contract suite. open returns an empty store for one subtest; subtests run one after
// another, so open may hand out stores that share a backend as long as each starts out empty (a fresh
// prefix, bucket or directory).
func Run(t *testing.T, open func(t *testing.T) blob.Store, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s blob.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Empty", testEmpty},
		{"Streamed20MiB", testStreamed20MiB},
		{"Known20MiB", testKnown20MiB},
		{"SizeMismatch", testSizeMismatch},
		{"SizeMismatch20MiB", testSizeMismatch20MiB},
		{"ReaderError", testReaderError},
		{"Overwrite", testOverwrite},
		{"Missing", testMissing},
		{"GetRange", testGetRange},
		{"NestedKeys", func(t *testing.T, s blob.Store) { testNestedKeys(t, s, o) }},
		{"InvalidKeys", testInvalidKeys},
		{"ValidKeys", testValidKeys},
		{"PutIfCreateOnly", testPutIfCreateOnly},
		{"PutIfMatch", testPutIfMatch},
		{"PutIfAfterPut", testPutIfAfterPut},
		{"PutIfRace", testPutIfRace},
		{"PutIfCreateRace", testPutIfCreateRace},
		{"PutIfCounter", testPutIfCounter},
		{"Delete", testDelete},
		{"Cancelled", testCancelled},
		{"Stat", testStat},
		{"StatAfterRewrite", testStatAfterRewrite},
		{"List", testList},
		{"ListMany", testListMany},
		{"ListInvalidPrefix", testListInvalidPrefix},
		{"ListCancelled", testListCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

func testRoundTrip(t *testing.T, s blob.Store) {
	ctx := t.Context()
	data := []byte("hello, blob")
	if err := s.Put(ctx, "dir/obj.txt", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := get(t, s, "dir/obj.txt"); !bytes.Equal(got, data) {
		t.Fatalf("Get = %q, want %q", got, data)
	}
	got, etag, err := s.Read(ctx, "dir/obj.txt")
	if err != nil || !bytes.Equal(got, data) || etag == "" {
		t.Fatalf("Read = %q, %q, %v; want %q, an etag, nil", got, etag, err, data)
	}
	if ok, err := s.Exists(ctx, "dir/obj.txt"); !ok || err != nil {
		t.Fatalf("Exists = %v, %v; want true, nil", ok, err)
	}
}

func testEmpty(t *testing.T, s blob.Store) {
	ctx := t.Context()
	if err := s.Put(ctx, "empty", bytes.NewReader(nil), 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := get(t, s, "empty"); len(got) != 0 {
		t.Fatalf("Get = %q, want empty", got)
	}
	if ok, err := s.Exists(ctx, "empty"); !ok || err != nil {
		t.Fatalf("Exists = %v, %v; want true, nil", ok, err)
	}
}

func testStreamed20MiB(t *testing.T, s blob.Store) {
	ctx := t.Context()
	const size = 20 << 20
	// A reader of unknown length (no Len, Seek or Stat), as from a pipe.
	if err := s.Put(ctx, "big/20mib", io.LimitReader(random(1), size), -1); err != nil {
		t.Fatalf("Put: %v", err)
	}
	want := sha256.New()
	io.Copy(want, io.LimitReader(random(1), size))
	rc, err := s.Get(ctx, "big/20mib")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got := sha256.New()
	n, err := io.Copy(got, rc)
	if err != nil || n != size {
		t.Fatalf("reading the object: %d bytes, %v; want %d bytes", n, err, size)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatal("content differs from what was put")
	}
}

// A large object of known size, as the snapshotter writes files (an adapter may split it in parts).
func testKnown20MiB(t *testing.T, s blob.Store) {
	ctx := t.Context()
	const size = 20<<20 + 3
	if err := s.Put(ctx, "big/known", io.LimitReader(random(3), size), size); err != nil {
		t.Fatalf("Put: %v", err)
	}
	want := sha256.New()
	io.Copy(want, io.LimitReader(random(3), size))
	if got := sha256.Sum256(get(t, s, "big/known")); !bytes.Equal(got[:], want.Sum(nil)) {
		t.Fatal("content differs from what was put")
	}
}

// A Put whose reader yields fewer or more bytes than size fails and leaves the previous object alone.
func testSizeMismatch(t *testing.T, s blob.Store) {
	ctx := t.Context()
	put(t, s, "k", "old")
	if err := s.Put(ctx, "k", strings.NewReader("short"), 10); err == nil {
		t.Fatal("Put with a short reader succeeded")
	}
	if err := s.Put(ctx, "k", strings.NewReader("much too long"), 4); err == nil {
		t.Fatal("Put with a long reader succeeded")
	}
	if err := s.Put(ctx, "new", strings.NewReader("short"), 10); err == nil {
		t.Fatal("Put with a short reader succeeded")
	}
	if got := get(t, s, "k"); string(got) != "old" {
		t.Fatalf("after failed Puts: %q, want %q", got, "old")
	}
	if ok, err := s.Exists(ctx, "new"); ok || err != nil {
		t.Fatalf("Exists after a failed Put = %v, %v; want false, nil", ok, err)
	}
}

// The same for an object large enough to be uploaded in parts: the mismatch shows only at the end.
func testSizeMismatch20MiB(t *testing.T, s blob.Store) {
	ctx := t.Context()
	const size = 20 << 20
	put(t, s, "k", "old")
	if err := s.Put(ctx, "k", io.LimitReader(random(4), size-1), size); err == nil {
		t.Fatal("Put with a short reader succeeded")
	}
	if err := s.Put(ctx, "k", io.LimitReader(random(4), size+1), size); err == nil {
		t.Fatal("Put with a long reader succeeded")
	}
	if err := s.Put(ctx, "new", io.LimitReader(random(4), size+1), size); err == nil {
		t.Fatal("Put with a long reader succeeded")
	}
	if got := get(t, s, "k"); string(got) != "old" {
		t.Fatalf("after failed Puts: %d bytes, want %q", len(got), "old")
	}
	if ok, err := s.Exists(ctx, "new"); ok || err != nil {
		t.Fatalf("Exists after a failed Put = %v, %v; want false, nil", ok, err)
	}
}

// A Put whose reader fails midway fails with that error and the object appears whole or not at all.
func testReaderError(t *testing.T, s blob.Store) {
	ctx := t.Context()
	put(t, s, "k", "old")
	boom := errors.New("boom")
	r := io.MultiReader(io.LimitReader(random(2), 1<<20), &errReader{boom})
	if err := s.Put(ctx, "k", r, -1); !errors.Is(err, boom) {
		t.Fatalf("Put = %v, want the reader's error", err)
	}
	if got := get(t, s, "k"); string(got) != "old" {
		t.Fatalf("after a failed Put: %d bytes, want %q", len(got), "old")
	}
}

func testOverwrite(t *testing.T, s blob.Store) {
	put(t, s, "k", "first")
	_, etag1, _ := s.Read(t.Context(), "k")
	put(t, s, "k", "second, longer")
	put(t, s, "k", "third")
	data, etag3, err := s.Read(t.Context(), "k")
	if err != nil || string(data) != "third" {
		t.Fatalf("Read = %q, %v; want %q", data, err, "third")
	}
	if etag1 == etag3 {
		t.Fatalf("etag %q unchanged by an overwrite with other content", etag1)
	}
}

func testMissing(t *testing.T, s blob.Store) {
	ctx := t.Context()
	if _, err := s.Get(ctx, "no/such"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
	if _, err := s.GetRange(ctx, "no/such", 0, 1); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("GetRange = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Read(ctx, "no/such"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Read = %v, want ErrNotFound", err)
	}
	if ok, err := s.Exists(ctx, "no/such"); ok || err != nil {
		t.Fatalf("Exists = %v, %v; want false, nil", ok, err)
	}
}

// A range is cut at the object's end; one starting at or past it is empty, an invalid one an error.
func testGetRange(t *testing.T, s blob.Store) {
	ctx := t.Context()
	data := []byte("0123456789abcdefghij")
	put(t, s, "ranged", string(data))
	for _, r := range []struct{ off, n int64 }{{0, 1}, {0, 20}, {5, 10}, {15, 100}, {19, 1}, {20, 1}, {1000, 5}} {
		rc, err := s.GetRange(ctx, "ranged", r.off, r.n)
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", r.off, r.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		want := data[min(r.off, 20):min(r.off+r.n, 20)]
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("GetRange(%d, %d) = %q, %v; want %q", r.off, r.n, got, err, want)
		}
	}
	for _, r := range []struct{ off, n int64 }{{-1, 5}, {0, 0}, {0, -1}, {1, math.MaxInt64}} {
		if rc, err := s.GetRange(ctx, "ranged", r.off, r.n); err == nil {
			rc.Close()
			t.Fatalf("GetRange(%d, %d) = nil error, want an invalid range", r.off, r.n)
		}
	}
}

// Keys are flat names: "a", "a/b" and "a/b/c" are independent objects, and a key that is only a prefix
// of others holds no object.
func testNestedKeys(t *testing.T, s blob.Store, o options) {
	ctx := t.Context()
	put(t, s, "a/b", "ab")
	if ok, err := s.Exists(ctx, "a"); ok || err != nil {
		t.Fatalf("Exists(a) = %v, %v; want false, nil", ok, err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get(a) = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Read(ctx, "a/b/c"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Read(a/b/c) = %v, want ErrNotFound", err)
	}
	if o.nestedKeysUnsupported != "" {
		t.Skipf("the test server cannot hold \"a\" beside \"a/b\": %s", o.nestedKeysUnsupported)
	}
	put(t, s, "a", "a")
	put(t, s, "a/b/c", "abc")
	for k, want := range map[string]string{"a": "a", "a/b": "ab", "a/b/c": "abc"} {
		if got := get(t, s, k); string(got) != want {
			t.Errorf("Get(%s) = %q, want %q", k, got, want)
		}
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "a/b/c"); string(got) != "abc" {
		t.Errorf("Get(a/b/c) after Delete(a/b) = %q", got)
	}
}

var invalidKeys = []string{
	"", "/", "/a", "a/", "a//b", ".", "..", "../a", "a/..", "a/../b", "./a", "a/./b",
	"a b", "a\x00b", "a\\b", "a:b", "a?b", "a*b", "é", "a\nb", "~a", "a#",
	strings.Repeat("k", 1025),
	strings.Repeat("abcdefghi/", 102) + "abcdefg", // 1027 bytes
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	ctx := t.Context()
	for _, k := range invalidKeys {
		name := k
		if len(name) > 40 {
			name = fmt.Sprintf("%d_bytes", len(k))
		}
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, blob.ErrInvalidKey) {
					t.Errorf("%s = %v, want ErrInvalidKey", op, err)
				}
			}
			check("Put", s.Put(ctx, k, strings.NewReader("x"), 1))
			_, err := s.Get(ctx, k)
			check("Get", err)
			_, err = s.GetRange(ctx, k, 0, 1)
			check("GetRange", err)
			_, err = s.Exists(ctx, k)
			check("Exists", err)
			_, _, err = s.Read(ctx, k)
			check("Read", err)
			_, err = s.PutIf(ctx, k, []byte("x"), "")
			check("PutIf", err)
			check("Delete", s.Delete(ctx, k))
		})
	}
}

func testValidKeys(t *testing.T, s blob.Store) {
	seg := strings.Repeat("s", 99) + "/" // 100 bytes
	keys := []string{
		"a", "A-Z_a.z-0.9", ".hidden/.x", "x/y/z/w/v/u", "sandboxes/iss.user-1/blobs/" + strings.Repeat("f", 64),
		"v1.2.3/file.tar.gz", "-dash/_under",
		strings.Repeat(seg, 10) + strings.Repeat("k", 24), // exactly 1024 bytes
	}
	for _, k := range keys {
		put(t, s, k, k)
	}
	for _, k := range keys {
		if got := get(t, s, k); string(got) != k {
			t.Errorf("Get(%.40s…) = %.40q…", k, got)
		}
	}
}

func testPutIfCreateOnly(t *testing.T, s blob.Store) {
	ctx := t.Context()
	etag, err := s.PutIf(ctx, "latest", []byte("v1"), "")
	if err != nil || etag == "" {
		t.Fatalf("first create-only PutIf = %q, %v; want an etag", etag, err)
	}
	if _, err := s.PutIf(ctx, "latest", []byte("v2"), ""); !errors.Is(err, blob.ErrPrecondition) {
		t.Fatalf("second create-only PutIf = %v, want ErrPrecondition", err)
	}
	data, got, err := s.Read(ctx, "latest")
	if err != nil || string(data) != "v1" || got != etag {
		t.Fatalf("Read = %q, %q, %v; want %q, %q", data, got, err, "v1", etag)
	}
}

func testPutIfMatch(t *testing.T, s blob.Store) {
	ctx := t.Context()
	if _, err := s.PutIf(ctx, "k", []byte("x"), "some-etag"); !errors.Is(err, blob.ErrPrecondition) {
		t.Fatalf("PutIf with an etag on a missing key = %v, want ErrPrecondition", err)
	}
	e1, err := s.PutIf(ctx, "k", []byte("one"), "")
	if err != nil {
		t.Fatal(err)
	}
	e2, err := s.PutIf(ctx, "k", []byte("two"), e1)
	if err != nil {
		t.Fatalf("PutIf with the current etag: %v", err)
	}
	if e2 == e1 {
		t.Fatalf("etag %q unchanged by a write of other content", e1)
	}
	if _, err := s.PutIf(ctx, "k", []byte("three"), e1); !errors.Is(err, blob.ErrPrecondition) {
		t.Fatalf("PutIf with a stale etag = %v, want ErrPrecondition", err)
	}
	if _, err := s.PutIf(ctx, "k", []byte("three"), "not-an-etag"); !errors.Is(err, blob.ErrPrecondition) {
		t.Fatalf("PutIf with a wrong etag = %v, want ErrPrecondition", err)
	}
	data, etag, err := s.Read(ctx, "k")
	if err != nil || string(data) != "two" || etag != e2 {
		t.Fatalf("Read = %q, %q, %v; want %q, %q", data, etag, err, "two", e2)
	}
}

// The ETag from Read works for PutIf on an object written by Put, and a Put in between invalidates it.
func testPutIfAfterPut(t *testing.T, s blob.Store) {
	ctx := t.Context()
	put(t, s, "k", "by put")
	_, etag, err := s.Read(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "by another put")
	if _, err := s.PutIf(ctx, "k", []byte("cas"), etag); !errors.Is(err, blob.ErrPrecondition) {
		t.Fatalf("PutIf after an intervening Put = %v, want ErrPrecondition", err)
	}
	_, etag, _ = s.Read(ctx, "k")
	if _, err := s.PutIf(ctx, "k", []byte("cas"), etag); err != nil {
		t.Fatalf("PutIf with Read's etag: %v", err)
	}
	if got := get(t, s, "k"); string(got) != "cas" {
		t.Fatalf("Get = %q, want %q", got, "cas")
	}
}

// Of 20 writers racing with the same etag exactly one wins, and its data is what is stored.
func testPutIfRace(t *testing.T, s blob.Store) {
	ctx := t.Context()
	etag, err := s.PutIf(ctx, "latest", []byte("base"), "")
	if err != nil {
		t.Fatal(err)
	}
	winner := race(t, 20, func(i int) error {
		_, err := s.PutIf(ctx, "latest", fmt.Appendf(nil, "writer %d", i), etag)
		return err
	})
	if got := get(t, s, "latest"); string(got) != fmt.Sprintf("writer %d", winner) {
		t.Fatalf("stored %q, but writer %d won", got, winner)
	}
}

func testPutIfCreateRace(t *testing.T, s blob.Store) {
	ctx := t.Context()
	winner := race(t, 20, func(i int) error {
		_, err := s.PutIf(ctx, "once", fmt.Appendf(nil, "writer %d", i), "")
		return err
	})
	if got := get(t, s, "once"); string(got) != fmt.Sprintf("writer %d", winner) {
		t.Fatalf("stored %q, but writer %d won", got, winner)
	}
}

// race runs n goroutines released together and checks that exactly one returned nil and all others
// ErrPrecondition; it returns the winner.
func race(t *testing.T, n int, fn func(i int) error) int {
	t.Helper()
	var (
		start  = make(chan struct{})
		wg     sync.WaitGroup
		errs   = make([]error, n)
		winner = -1
	)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, blob.ErrPrecondition):
			t.Fatalf("writer %d: %v, want nil or ErrPrecondition", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	return winner
}

// Read-modify-PutIf loops lose no update: PutIf is a linearizable compare-and-set.
func testPutIfCounter(t *testing.T, s blob.Store) {
	ctx := t.Context()
	const workers, increments = 8, 10
	if _, err := s.PutIf(ctx, "counter", []byte("0"), ""); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range increments {
				if err := Increment(ctx, s, "counter"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := get(t, s, "counter"); string(got) != fmt.Sprint(workers*increments) {
		t.Fatalf("counter = %s, want %d", got, workers*increments)
	}
}

// Increment adds one to the decimal counter at key with a Read/PutIf loop. Adapter tests use it to race
// several processes on one store.
func Increment(ctx context.Context, s blob.Store, key string) error {
	for {
		data, etag, err := s.Read(ctx, key)
		if err != nil {
			return err
		}
		var n int
		if _, err := fmt.Sscan(string(data), &n); err != nil {
			return fmt.Errorf("counter %q: %w", data, err)
		}
		_, err = s.PutIf(ctx, key, fmt.Append(nil, n+1), etag)
		if errors.Is(err, blob.ErrPrecondition) {
			continue
		}
		return err
	}
}

func testDelete(t *testing.T, s blob.Store) {
	ctx := t.Context()
	put(t, s, "d/k", "x")
	for i := range 2 {
		if err := s.Delete(ctx, "d/k"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if err := s.Delete(ctx, "never/existed"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if ok, err := s.Exists(ctx, "d/k"); ok || err != nil {
		t.Fatalf("Exists after Delete = %v, %v; want false, nil", ok, err)
	}
	if _, err := s.Get(ctx, "d/k"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	if _, err := s.PutIf(ctx, "d/k", []byte("again"), ""); err != nil {
		t.Fatalf("create-only PutIf after Delete: %v", err)
	}
}

// Work refused because the context ended changes nothing.
func testCancelled(t *testing.T, s blob.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Put(ctx, "k", strings.NewReader("x"), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put = %v, want context.Canceled", err)
	}
	if _, err := s.PutIf(ctx, "k", []byte("x"), ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutIf = %v, want context.Canceled", err)
	}
	if ok, err := s.Exists(t.Context(), "k"); ok || err != nil {
		t.Fatalf("Exists = %v, %v; want false, nil", ok, err)
	}
}

// Stat gives an object's key, size and a modification time by a clock close to the test's.
func testStat(t *testing.T, s blob.Store) {
	ctx := t.Context()
	before := time.Now()
	put(t, s, "st/k", "12345")
	after := time.Now()
	o, err := s.Stat(ctx, "st/k")
	if err != nil {
		t.Fatal(err)
	}
	// Servers keep whole seconds and run on their own clock: allow for both.
	if o.Key != "st/k" || o.Size != 5 || o.Modified.Before(before.Add(-2*time.Second)) || o.Modified.After(after.Add(2*time.Second)) {
		t.Fatalf("Stat = %+v; want st/k, 5 bytes, modified between %v and %v", o, before, after)
	}
	put(t, s, "st/empty", "")
	if o, err := s.Stat(ctx, "st/empty"); err != nil || o.Size != 0 {
		t.Fatalf("Stat(empty) = %+v, %v", o, err)
	}
	if _, err := s.Stat(ctx, "st/none"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Stat of a missing key = %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, "st"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Stat of a key that is only a prefix = %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, "../x"); !errors.Is(err, blob.ErrInvalidKey) {
		t.Fatalf("Stat of an invalid key = %v, want ErrInvalidKey", err)
	}
}

// Writing an object again, even with the same content, moves its modification time forward: garbage
// collection by age relies on it (a snapshot refreshes an old blob it reuses by writing it again).
func testStatAfterRewrite(t *testing.T, s blob.Store) {
	ctx := t.Context()
	put(t, s, "rw/k", "same")
	o1, err := s.Stat(ctx, "rw/k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past a whole-second clock's next tick
	put(t, s, "rw/k", "same")
	o2, err := s.Stat(ctx, "rw/k")
	if err != nil {
		t.Fatal(err)
	}
	if !o2.Modified.After(o1.Modified) {
		t.Fatalf("modified %v after a rewrite, %v before: want later", o2.Modified, o1.Modified)
	}
	listed := list(t, s, "rw/")
	if got := listed["rw/k"]; !got.Modified.Equal(o2.Modified) && got.Modified.Sub(o2.Modified).Abs() > time.Second {
		t.Fatalf("List says modified %v, Stat %v", got.Modified, o2.Modified)
	}
}

// List yields exactly the objects whose keys start with the prefix, a raw string prefix as in S3.
func testList(t *testing.T, s blob.Store) {
	ctx := t.Context()
	objs := map[string]string{"l/a": "1", "l/b/c": "22", "l/bz": "333", "lx": "4444", "m/a": "55555"}
	for k, v := range objs {
		put(t, s, k, v)
	}
	for prefix, want := range map[string][]string{
		"":      {"l/a", "l/b/c", "l/bz", "lx", "m/a"},
		"l":     {"l/a", "l/b/c", "l/bz", "lx"},
		"l/":    {"l/a", "l/b/c", "l/bz"},
		"l/b":   {"l/b/c", "l/bz"},
		"l/b/":  {"l/b/c"},
		"l/a":   {"l/a"},
		"none/": nil,
		"l/b/c": {"l/b/c"},
	} {
		got := list(t, s, prefix)
		if len(got) != len(want) {
			t.Errorf("List(%q) = %v, want %v", prefix, keys(got), want)
			continue
		}
		for _, k := range want {
			if o, ok := got[k]; !ok || o.Size != int64(len(objs[k])) || o.Modified.IsZero() {
				t.Errorf("List(%q)[%s] = %+v, %v; want %d bytes and a time", prefix, k, o, ok, len(objs[k]))
			}
		}
	}
	if err := s.Delete(ctx, "l/bz"); err != nil {
		t.Fatal(err)
	}
	if got := list(t, s, "l/b"); len(got) != 1 {
		t.Errorf("List(l/b) after deleting l/bz = %v", keys(got))
	}
	n := 0
	for _, err := range s.List(ctx, "") { // stopping early is allowed
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}
}

// Many objects: S3 pages a listing; every object comes exactly once.
func testListMany(t *testing.T, s blob.Store) {
	const n = 23
	for i := range n {
		put(t, s, fmt.Sprintf("many/%02d", i), "x")
	}
	seen := make(map[string]int)
	for o, err := range s.List(t.Context(), "many/") {
		if err != nil {
			t.Fatal(err)
		}
		seen[o.Key]++
	}
	if len(seen) != n {
		t.Fatalf("listed %d distinct objects, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("%s listed %d times", k, c)
		}
	}
}

func testListInvalidPrefix(t *testing.T, s blob.Store) {
	for _, p := range []string{"/", "a//", "/a", "../x", "a/../b", "a b", "a#", strings.Repeat("k", 1025)} {
		n := 0
		for _, err := range s.List(t.Context(), p) {
			n++
			if !errors.Is(err, blob.ErrInvalidKey) {
				t.Errorf("List(%.20q) yielded %v, want ErrInvalidKey", p, err)
			}
		}
		if n != 1 {
			t.Errorf("List(%.20q) yielded %d times, want one error", p, n)
		}
	}
}

func testListCancelled(t *testing.T, s blob.Store) {
	put(t, s, "c/k", "x")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var last error
	for o, err := range s.List(ctx, "c/") {
		if err == nil {
			t.Fatalf("a cancelled List yielded %+v", o)
		}
		last = err
	}
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("cancelled List ended with %v, want context.Canceled", last)
	}
}

// list collects a List by key, failing the test on an error.
func list(t *testing.T, s blob.Store, prefix string) map[string]blob.Object {
	t.Helper()
	got := make(map[string]blob.Object)
	for o, err := range s.List(t.Context(), prefix) {
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		if _, dup := got[o.Key]; dup {
			t.Fatalf("List(%q) yielded %s twice", prefix, o.Key)
		}
		got[o.Key] = o
	}
	return got
}

func keys(m map[string]blob.Object) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func put(t *testing.T, s blob.Store, key, data string) {
	t.Helper()
	if err := s.Put(t.Context(), key, strings.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%.40s): %v", key, err)
	}
}

func get(t *testing.T, s blob.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%.40s): %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%.40s): reading: %v", key, err)
	}
	return data
}

// random is a deterministic stream of pseudo-random bytes of unknown length.
func random(seed uint64) io.Reader {
	return &rngReader{rand.NewChaCha8([32]byte{byte(seed)})}
}

type rngReader struct{ c *rand.ChaCha8 }

func (r *rngReader) Read(p []byte) (int, error) { return r.c.Read(p) }

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }
