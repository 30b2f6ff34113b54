// Package blob is the BlobStore port (docs/ARCHITECTURE.md#ports-and-adapters): object storage, which
// holds the runner's snapshots (runner/snapshot). Adapters: fs (a directory, warren dev) and s3 (S3 and
// S3-compatible servers). Keys are slash-separated paths of [A-Za-z0-9._/-], at most 1024 bytes, without "."
// or ".." segments, empty segments or a leading slash; any other key is ErrInvalidKey from every method
// (CheckKey). "a" and "a/b" are two independent keys, as in S3.
//
// The contract every adapter must pass is the suite in package blobtest.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"strings"
	"time"
)

// Store is an object store. Safe for concurrent use by many processes.
type Store interface {
	// Put writes the object at key from r (size bytes, or -1 when unknown), replacing any object there.
	// The object appears whole or not at all.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object at key; ErrNotFound when absent.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// GetRange opens the n bytes (n > 0) of the object at key from byte off (>= 0), fewer when the
	// object ends sooner, none when it ends at or before off; ErrNotFound when absent. Readers fetch
	// large objects in parallel ranges with it.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Exists reports whether key holds an object.
	Exists(ctx context.Context, key string) (bool, error)
	// Read returns a small object and its ETag; ErrNotFound when absent.
	Read(ctx context.Context, key string) (data []byte, etag string, err error)
	// PutIf writes a small object only if the current object's ETag equals ifMatch, or, with ifMatch "",
	// only if no object exists. ErrPrecondition otherwise. It returns the new ETag. This is the
	// compare-and-set that fences manifests by epoch. It is linearizable with every other write to key,
	// from any process: of many callers passing the same ifMatch, at most one succeeds.
	//
	// ETags are opaque, compared only for equality and only for the same key; an adapter may derive them
	// from the content (so rewriting identical bytes keeps the ETag), which is why fenced values must change
	// on every write (an epoch, a sequence number or a time).
	PutIf(ctx context.Context, key string, data []byte, ifMatch string) (etag string, err error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Stat describes the object at key; ErrNotFound when absent.
	Stat(ctx context.Context, key string) (Object, error)
	// List yields every object whose key starts with prefix ("" or a key, optionally followed by a slash;
	// anything else is ErrInvalidKey), in no particular order, then stops at the first error, which it
	// yields with a zero Object. Objects written or deleted while a List runs may or may not be seen;
	// every object present for the whole List is seen exactly once.
	List(ctx context.Context, prefix string) iter.Seq2[Object, error]
}

// Object describes a stored object.
type Object struct {
	Key  string
	Size int64
	// Modified is when the object was last written (a Put or PutIf, also of identical content), by the
	// store's clock.
	Modified time.Time
}

// Sentinel errors, tested with errors.Is; adapters wrap them with the key.
var (
	ErrNotFound     = errors.New("blob not found")
	ErrPrecondition = errors.New("blob precondition failed")
	ErrInvalidKey   = errors.New("invalid blob key")
	ErrUnavailable  = errors.New("blob store unavailable")
)

// MaxKeyLen is the length limit of a key, in bytes (S3's).
const MaxKeyLen = 1024

// CheckKey returns nil if key follows the key rules in the package comment, else an error wrapping
// ErrInvalidKey that says why. Adapters call it first in every method; an adapter may refuse more keys
// (a file system's segment length), never fewer.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' ||
			c == '-' || c == '/') {
			return fmt.Errorf("%w: %q: byte %#x at %d", ErrInvalidKey, key, c, i)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %q: empty segment or leading or trailing slash", ErrInvalidKey, key)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w: %q: %q segment", ErrInvalidKey, key, seg)
		}
	}
	return nil
}

// CheckPrefix returns nil if prefix is a valid List prefix: "" or a key, optionally followed by one slash.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := CheckKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

// CheckRange returns nil if off and n are a valid GetRange: off >= 0, n > 0, off+n without overflow.
func CheckRange(off, n int64) error {
	if off < 0 || n <= 0 || off > math.MaxInt64-n {
		return fmt.Errorf("invalid range: %d bytes from %d", n, off)
	}
	return nil
}

// ListErr is a List that yields err alone: for adapters refusing a prefix or a cancelled context.
func ListErr(err error) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) { yield(Object{}, err) }
}
