package warren

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// File shapes of the protocol (docs/PROTOCOL.md#files), re-exported.
type (
	FileEvent         = wire.FileEvent
	FileWatchReady    = wire.FileWatchReady
	FileWatchOverflow = wire.FileWatchOverflow
)

// File change operations, in FileEvent.Ops, and the reasons of a FileWatchOverflow.
const (
	FileOpCreate   = wire.FileOpCreate
	FileOpWrite    = wire.FileOpWrite
	FileOpRemove   = wire.FileOpRemove
	FileOpRename   = wire.FileOpRename
	FileOpChmod    = wire.FileOpChmod
	OverflowQueue  = wire.OverflowQueue
	OverflowKernel = wire.OverflowKernel
	OverflowDirs   = wire.OverflowDirs
)

// Stat describes the file, directory or symlink at path (a symlink is not followed).
func (s *Sandbox) Stat(ctx context.Context, path string) (*FileInfo, error) {
	var fi FileInfo
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/files/stat", pathQuery(path), nil, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// Mkdir creates the directory at path. With parents it is mkdir -p: missing parents are made and an
// existing directory is fine; without, a missing parent is not_found and an existing path conflict.
func (s *Sandbox) Mkdir(ctx context.Context, path string, parents bool) (*FileInfo, error) {
	q := pathQuery(path)
	if parents {
		q.Set("parents", "true")
	}
	var fi FileInfo
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandbox/files/mkdir", q, nil, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// MoveOptions tunes Move.
type MoveOptions struct {
	Overwrite bool // replace what is at the destination (else conflict)
	Parents   bool // create the destination's missing parent directories
}

// Move renames the file, directory or symlink at from to to (atomically, within the workspace) and
// describes it at its new place.
func (s *Sandbox) Move(ctx context.Context, from, to string, opt *MoveOptions) (*FileInfo, error) {
	m := wire.FileMoveRequest{From: from, To: to}
	if opt != nil {
		m.Overwrite, m.Parents = opt.Overwrite, opt.Parents
	}
	var fi FileInfo
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandbox/files/move", nil, m, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// OpenRange streams length bytes of the file at path from offset (to the end when length is 0 or less),
// for resuming a large download. An offset at or past the end is an error. The caller must close the
// reader.
func (s *Sandbox) OpenRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("warren: negative offset %d", offset)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.endpoint("/v1/sandbox/files", pathQuery(path)), nil)
	if err != nil {
		return nil, err
	}
	r := "bytes=" + strconv.FormatInt(offset, 10) + "-"
	if length > 0 {
		r += strconv.FormatInt(offset+length-1, 10)
	}
	req.Header.Set("Range", r)
	req.Header.Set("Accept", "application/octet-stream")
	resp, err := s.c.do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusPartialContent && offset > 0 {
		resp.Body.Close()
		return nil, fmt.Errorf("warren: GET %s with Range %s answered %d, not a part", path, r, resp.StatusCode)
	}
	return resp.Body, nil
}

// WatchOptions tunes Watch.
type WatchOptions struct {
	// NotRecursive watches the directory alone; by default its subdirectories, and new ones, are watched.
	NotRecursive bool
	// Debounce is the window in which changes are coalesced (10ms to 5s; 0: the server's 50ms).
	Debounce time.Duration
}

// WatchEvent is one event of a watch: exactly one field is set. Ready comes first, once the directories are
// watched; then a Change per changed path per debounce window; an Overflow says changes were lost (list
// again).
type WatchEvent struct {
	Ready    *FileWatchReady    `json:"ready,omitempty"`
	Change   *FileEvent         `json:"change,omitempty"`
	Overflow *FileWatchOverflow `json:"overflow,omitempty"`
}

// Watch follows the changes under the directory at path until ctx ends or the iteration stops (either
// closes the stream and frees the watch), or the watched directory is removed or moved (after a Change
// for it; the sequence then ends without error). A failure is yielded once as the last element.
func (s *Sandbox) Watch(ctx context.Context, path string, opt *WatchOptions) iter.Seq2[WatchEvent, error] {
	return func(yield func(WatchEvent, error) bool) {
		q := pathQuery(path)
		if opt != nil && opt.NotRecursive {
			q.Set("recursive", "false")
		}
		if opt != nil && opt.Debounce > 0 {
			q.Set("debounceMs", strconv.FormatInt(opt.Debounce.Milliseconds(), 10))
		}
		err := s.watch(ctx, q, yield)
		if err != nil {
			yield(WatchEvent{}, err)
		}
	}
}

func (s *Sandbox) watch(ctx context.Context, q url.Values, yield func(WatchEvent, error) bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.endpoint("/v1/sandbox/files/watch", q), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	events := newSSEReader(resp.Body)
	root, rootGone := "", false
	for {
		ev, err := events.Next()
		if errors.Is(err, io.EOF) {
			if rootGone {
				return nil
			}
			return fmt.Errorf("warren: watch stream ended: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		var we WatchEvent
		switch ev.Event {
		case wire.EventWatchReady:
			we.Ready = &FileWatchReady{}
			err = decodeSSE(ev, we.Ready)
			root = we.Ready.Path
		case wire.EventFileChange:
			we.Change = &FileEvent{}
			err = decodeSSE(ev, we.Change)
			rootGone = rootGone || we.Change.Path == root
		case wire.EventWatchOverflow:
			we.Overflow = &FileWatchOverflow{}
			err = decodeSSE(ev, we.Overflow)
		default:
			continue // future additions
		}
		if err != nil {
			return err
		}
		if !yield(we, nil) {
			return nil
		}
	}
}
