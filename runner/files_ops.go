package runner

import (
	"net/http"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/workspace"
)

// The file routes (docs/PROTOCOL.md#files), confined to the workspace (runner/workspace): read, write,
// delete and list (files.go), and:
//
//	GET  /v1/sandbox/files/stat?path=P                    → wire.FileInfo (a symlink is not followed)
//	POST /v1/sandbox/files/mkdir?path=P[&parents=true]    → 201 wire.FileInfo, 200 when it existed (parents)
//	POST /v1/sandbox/files/move  wire.FileMoveRequest     → wire.FileInfo of the destination
//	GET  /v1/sandbox/files/watch?path=P[&recursive=][&debounceMs=]  → SSE (runner/fswatch)
func (a *api) fileRoutes(s web.Serve) {
	s.Handle("/v1/sandbox/files", web.Methods{
		http.MethodGet: a.readFile, http.MethodPut: a.writeFile, http.MethodDelete: a.deleteFile,
	})
	s.Handle("/v1/sandbox/files/list", web.Methods{http.MethodGet: a.listFiles})
	s.Handle("/v1/sandbox/files/stat", web.Methods{http.MethodGet: a.statFile})
	s.Handle("/v1/sandbox/files/mkdir", web.Methods{http.MethodPost: a.mkdir})
	s.Handle("/v1/sandbox/files/move", web.Methods{http.MethodPost: a.moveFile})
}

func (a *api) statFile(w http.ResponseWriter, req *http.Request) {
	p, ok := a.pathParam(w, req, "stat")
	if !ok {
		return
	}
	info, err := a.root.Stat(p)
	if err != nil {
		a.fileFail(w, req, "stat", err)
		return
	}
	a.r.metrics.fileOps.WithLabelValues("stat", "ok").Inc()
	web.WriteJSON(w, http.StatusOK, info)
}

func (a *api) mkdir(w http.ResponseWriter, req *http.Request) {
	p, ok := a.pathParam(w, req, "mkdir")
	if !ok {
		return
	}
	parents, ok := a.boolParam(w, req, "mkdir", "parents", false)
	if !ok {
		return
	}
	if err := a.r.disk.check(); err != nil {
		a.fileFail(w, req, "mkdir", err)
		return
	}
	info, created, err := a.root.Mkdir(p, parents)
	if err == nil && created && a.r.parts.uid != nil {
		err = a.root.Give(info.Path, int(a.r.parts.uid.UID), int(a.r.parts.uid.UID))
	}
	if err != nil {
		a.fileFail(w, req, "mkdir", err)
		return
	}
	a.r.metrics.fileOps.WithLabelValues("mkdir", "ok").Inc()
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	web.WriteJSON(w, status, info)
}

func (a *api) moveFile(w http.ResponseWriter, req *http.Request) {
	m, err := wire.DecodeFileMove(req.Body)
	if err != nil {
		a.fileFail(w, req, "move", err)
		return
	}
	info, err := a.root.Move(m.From, m.To, workspace.MoveOptions{Overwrite: m.Overwrite, Parents: m.Parents})
	if err == nil && m.Parents && a.r.parts.uid != nil {
		err = a.root.Give(info.Path, int(a.r.parts.uid.UID), int(a.r.parts.uid.UID))
	}
	if err != nil {
		a.fileFail(w, req, "move", err)
		return
	}
	a.r.metrics.fileOps.WithLabelValues("move", "ok").Inc()
	web.WriteJSON(w, http.StatusOK, info)
}
