// Package files is the file routes of docs/PROTOCOL.md#sandbox-api, beside runner/workspace, which does the
// file operations. Paths (?path=) are relative to the workspace root and confined to it by
// runner/workspace: malformed paths (NUL, invalid UTF-8) are invalid_argument, absolute paths and paths or
// symlinks leading outside are permission_denied. The routes (ops.go):
//
//	GET    /v1/sandbox/files?path=P                        → the raw bytes (Range: 206 with that part)
//	PUT    /v1/sandbox/files?path=P[&parents=false]        → 201/200 wire.FileWritten
//	DELETE /v1/sandbox/files?path=P[&recursive=true]       → 204
//	GET    /v1/sandbox/files/list?path=P                   → wire.FileList
//	GET    /v1/sandbox/files/stat?path=P                   → wire.FileInfo (a symlink is not followed)
//	POST   /v1/sandbox/files/mkdir?path=P[&parents=true]   → 201 wire.FileInfo, 200 when it existed (parents)
//	POST   /v1/sandbox/files/move  wire.FileMoveRequest    → wire.FileInfo of the destination
//
// The watch route is runner/fswatch.
package files

import (
	"net/http"
	"os"
	"strconv"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/workspace"
)

// readFile serves GET /v1/sandbox/files?path=P: the raw bytes of a regular file, or with Range the
// requested part of them.
func (a *api) readFile(w http.ResponseWriter, req *http.Request) {
	p, ok := a.pathParam(w, req, "read")
	if !ok {
		return
	}
	f, _, err := a.root.Open(p)
	var fi os.FileInfo
	if err == nil {
		if fi, err = f.Stat(); err != nil {
			f.Close()
		}
	}
	if err != nil {
		a.fileFail(w, req, "read", err)
		return
	}
	defer f.Close()
	a.f.cfg.Ops.WithLabelValues("read", "ok").Inc()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Streamed from the file, never buffered; a Range header (one range) answers 206 with that part, so
	// a large download can resume (docs/PROTOCOL.md#files).
	http.ServeContent(w, req, "", fi.ModTime(), f)
}

// writeFile serves PUT /v1/sandbox/files?path=P[&parents=false]: the body, streamed to a temporary file and
// renamed into place. 201 when the file is new, 200 when it replaced one; 413 above MaxFileSize, leaving
// nothing behind; 409 when a directory is in the way.
func (a *api) writeFile(w http.ResponseWriter, req *http.Request) {
	p, ok := a.pathParam(w, req, "write")
	if !ok {
		return
	}
	parents, ok := a.boolParam(w, req, "write", "parents", true)
	if !ok {
		return
	}
	limit := a.f.cfg.MaxFileSize
	if req.ContentLength > limit {
		a.fileFail(w, req, "write", wire.Errorf(wire.PayloadTooLarge, "file exceeds the %d byte limit", limit))
		return
	}
	if ws := a.f.cfg.Host.WorkspaceLimit(); ws > 0 && ws < limit {
		limit = ws
	}
	// The upload's bytes count against the workspace's limit while it runs, so parallel uploads cannot
	// each pass the same check.
	reserve := req.ContentLength
	if reserve < 0 || reserve > limit {
		reserve = limit
	}
	release, err := a.f.cfg.Host.Reserve(reserve)
	if err != nil {
		a.fileFail(w, req, "write", err)
		return
	}
	defer release()
	res, err := a.root.Write(p, req.Body, workspace.WriteOptions{Parents: parents, MaxSize: limit})
	if err == nil {
		err = a.give(res.Path)
	}
	if err != nil {
		a.fileFail(w, req, "write", err)
		return
	}
	a.f.cfg.Ops.WithLabelValues("write", "ok").Inc()
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	_ = httpx.WriteJSON(w, status, wire.FileWritten{Path: res.Path, Size: res.Size})
}

// deleteFile serves DELETE /v1/sandbox/files?path=P[&recursive=true]: 204. A directory needs
// recursive=true (else 409 conflict, even when empty); the workspace root is refused (403).
func (a *api) deleteFile(w http.ResponseWriter, req *http.Request) {
	p, ok := a.pathParam(w, req, "delete")
	if !ok {
		return
	}
	recursive, ok := a.boolParam(w, req, "delete", "recursive", false)
	if !ok {
		return
	}
	if err := a.root.Remove(p, recursive); err != nil {
		a.fileFail(w, req, "delete", err)
		return
	}
	a.f.cfg.Ops.WithLabelValues("delete", "ok").Inc()
	w.WriteHeader(http.StatusNoContent)
}

// listFiles serves GET /v1/sandbox/files/list?path=P (default "."): a wire.FileList sorted by name.
func (a *api) listFiles(w http.ResponseWriter, req *http.Request) {
	l, err := a.root.List(req.URL.Query().Get("path"))
	if err != nil {
		a.fileFail(w, req, "list", err)
		return
	}
	a.f.cfg.Ops.WithLabelValues("list", "ok").Inc()
	_ = httpx.WriteJSON(w, http.StatusOK, l)
}

func (a *api) pathParam(w http.ResponseWriter, req *http.Request, op string) (string, bool) {
	q := req.URL.Query()
	if !q.Has("path") {
		a.fileFail(w, req, op, wire.Errorf(wire.InvalidArgument, "the path query parameter is required"))
		return "", false
	}
	return q.Get("path"), true
}

func (a *api) boolParam(w http.ResponseWriter, req *http.Request, op, name string, def bool) (bool, bool) {
	q := req.URL.Query()
	if !q.Has(name) {
		return def, true
	}
	v, err := strconv.ParseBool(q.Get(name))
	if err != nil {
		a.fileFail(w, req, op, wire.Errorf(wire.InvalidArgument, "%s must be true or false", name))
		return false, false
	}
	return v, true
}

// give hands a path the request created to the sandbox's host uid, if it has one.
func (a *api) give(p string) error {
	uid, ok := a.f.cfg.Host.Owner()
	if !ok {
		return nil
	}
	return a.root.Give(p, uid, uid)
}

func (a *api) fileFail(w http.ResponseWriter, req *http.Request, op string, err error) {
	a.f.cfg.Ops.WithLabelValues(op, string(wire.CodeOf(err))).Inc()
	web.Fail(w, req, err)
}
