// Package blob is the BlobStore port (DESIGN.md §3): snapshots, task results and git bundles in object
// storage. Adapters: fs (a directory, warren dev) and, later, s3. Keys are slash-separated paths of
// [A-Za-z0-9._/-] without "..", empty segments or a leading slash.
package blob

import (
	"context"
	"errors"
	"io"
)

// Store is an object store. Safe for concurrent use by many processes.
type Store interface {
	// Put writes the object at key from r (size bytes, or -1 when unknown), replacing any object there.
	// The object appears whole or not at all.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object at key; ErrNotFound when absent.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Exists reports whether key holds an object.
	Exists(ctx context.Context, key string) (bool, error)
	// Read returns a small object and its ETag; ErrNotFound when absent.
	Read(ctx context.Context, key string) (data []byte, etag string, err error)
	// PutIf writes a small object only if the current object's ETag equals ifMatch, or, with ifMatch "",
	// only if no object exists. ErrPrecondition otherwise. It returns the new ETag. This is the
	// compare-and-set that fences manifests by epoch.
	PutIf(ctx context.Context, key string, data []byte, ifMatch string) (etag string, err error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

var (
	ErrNotFound     = errors.New("blob not found")
	ErrPrecondition = errors.New("blob precondition failed")
	ErrInvalidKey   = errors.New("invalid blob key")
	ErrUnavailable  = errors.New("blob store unavailable")
)
