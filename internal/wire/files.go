package wire

import (
	"io"
	"net/url"
	"strconv"
	"time"
)

// File API shapes beyond read, write, list and delete (docs/PROTOCOL.md#files): stat, mkdir, move and
// watch. Paths are relative to the workspace root; the runner confines them (runner/workspace).

// FileMoveRequest is the body of POST /v1/sandbox/files/move. Without Overwrite an existing destination is
// conflict; with it a file (or an empty directory, when From is a directory) at To is replaced. Parents
// creates To's missing parent directories.
type FileMoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
}

// MaxFileMoveBody bounds the body of a move request: two paths of at most 4096 bytes each, JSON-escaped
// (up to 6 bytes a byte), and the flags.
const MaxFileMoveBody = 64 << 10

// DecodeFileMove reads and checks a move request's shape: both paths present. The runner checks the paths
// themselves (runner/workspace.Clean and os.Root).
func DecodeFileMove(r io.Reader) (FileMoveRequest, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileMoveBody+1))
	if err != nil {
		return FileMoveRequest{}, Wrap(InvalidArgument, err, "move request could not be read")
	}
	if len(b) > MaxFileMoveBody {
		return FileMoveRequest{}, Errorf(PayloadTooLarge, "move request exceeds %d bytes", MaxFileMoveBody)
	}
	var m FileMoveRequest
	if err := DecodeStrict(b, &m); err != nil {
		return FileMoveRequest{}, Errorf(InvalidArgument, "move request is not valid: %s", trimJSONErr(err))
	}
	if m.From == "" || m.To == "" {
		return FileMoveRequest{}, Errorf(InvalidArgument, "move request needs from and to")
	}
	return m, nil
}

// Server-sent events of GET /v1/sandbox/files/watch (Accept: text/event-stream).
const (
	// EventWatchReady (data FileWatchReady) comes first, once the directories are watched: changes made
	// after it is received are reported.
	EventWatchReady = "ready"
	// EventFileChange (data FileEvent) reports what happened to one path during one debounce window.
	EventFileChange = "change"
	// EventWatchOverflow (data FileWatchOverflow) says changes were lost: the client should list again.
	EventWatchOverflow = "overflow"
)

// File change operations, in FileEvent.Ops.
const (
	FileOpCreate = "create" // created, or moved into the watched tree
	FileOpWrite  = "write"  // content modified
	FileOpRemove = "remove" // deleted
	FileOpRename = "rename" // moved away (its new name, when watched, comes as a create)
	FileOpChmod  = "chmod"  // metadata (mode, owner, times) changed
)

// FileEvent is the data of a change event: the operations seen on Path (relative to the workspace root)
// during one debounce window, in the order first seen. Dir is set when Path was a directory.
type FileEvent struct {
	Path string   `json:"path"`
	Ops  []string `json:"ops"`
	Dir  bool     `json:"dir,omitempty"`
}

// FileWatchReady is the data of the ready event.
type FileWatchReady struct {
	Path       string `json:"path"`       // the watched directory, cleaned
	Recursive  bool   `json:"recursive"`  // subdirectories (and new ones) are watched
	Dirs       int    `json:"dirs"`       // directories watched now
	DebounceMs int64  `json:"debounceMs"` // the coalescing window
}

// Reasons of an overflow event.
const (
	OverflowQueue  = "queue"  // the subscriber fell behind: more distinct paths changed than it may queue
	OverflowKernel = "kernel" // the kernel's inotify queue overflowed
	OverflowDirs   = "dirs"   // a new directory could not be watched: the watch-directory limit was reached
)

// FileWatchOverflow is the data of an overflow event. Dropped counts the changes not reported.
type FileWatchOverflow struct {
	Reason  string `json:"reason"`
	Dropped int64  `json:"dropped"`
	Message string `json:"message"`
}

// Bounds of the watch query.
const (
	DefaultWatchDebounce = 50 * time.Millisecond
	MinWatchDebounce     = 10 * time.Millisecond
	MaxWatchDebounce     = 5 * time.Second
)

// WatchQuery is the parsed query of GET /v1/sandbox/files/watch.
type WatchQuery struct {
	Path      string        // as given ("" is the root); the runner cleans and confines it
	Recursive bool          // default true
	Debounce  time.Duration // default DefaultWatchDebounce
}

// ParseWatchQuery reads ?path=&recursive=&debounceMs= (all optional). A debounceMs outside
// [MinWatchDebounce, MaxWatchDebounce] or not an integer, or a recursive that is not a boolean, is
// invalid_argument.
func ParseWatchQuery(q url.Values) (WatchQuery, error) {
	w := WatchQuery{Path: q.Get("path"), Recursive: true, Debounce: DefaultWatchDebounce}
	if v := q.Get("recursive"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return WatchQuery{}, Errorf(InvalidArgument, "recursive must be true or false")
		}
		w.Recursive = b
	}
	if v := q.Get("debounceMs"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < MinWatchDebounce.Milliseconds() || n > MaxWatchDebounce.Milliseconds() {
			return WatchQuery{}, Errorf(InvalidArgument, "debounceMs must be an integer from %d to %d",
				MinWatchDebounce.Milliseconds(), MaxWatchDebounce.Milliseconds())
		}
		w.Debounce = time.Duration(n) * time.Millisecond
	}
	return w, nil
}
