package files

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/workspace"
)

// Host is what the file routes use of the runner. Its methods may be called concurrently.
type Host interface {
	// Reserve holds n bytes of the workspace's limit for an upload until release, refusing
	// (resource_exhausted) when the workspace and the uploads in flight would be over it.
	Reserve(n int64) (release func(), err error)
	// Check refuses (resource_exhausted) while the workspace is over its limit.
	Check() error
	// WorkspaceLimit is the workspace's limit in bytes now (0: none).
	WorkspaceLimit() int64
	// Owner is the host uid that owns the sandbox's files (ok false: files keep the runner's).
	Owner() (uid int, ok bool)
}

// Config is what the file routes are built with.
type Config struct {
	Host Host
	// Ops is the file operations' counter (labels op and result).
	Ops *prometheus.CounterVec
	// MaxFileSize bounds an upload.
	MaxFileSize int64
}

// API serves the file routes. Create it with New.
type API struct{ cfg Config }

// New makes the file routes.
func New(cfg Config) *API { return &API{cfg: cfg} }

// Busy is false: a file request keeps the sandbox awake as any request does, and nothing outlives it.
func (*API) Busy(time.Time) bool { return false }

// Close has nothing to end.
func (*API) Close(context.Context) error { return nil }

// api is the file routes of one Run, on its workspace.
type api struct {
	f    *API
	root *workspace.Root
}

// Routes mounts the file routes on s.
func (f *API) Routes(s web.Serve) {
	a := &api{f: f, root: s.Root}
	s.Handle("/v1/sandbox/files", httpx.Methods{
		http.MethodGet: a.readFile, http.MethodPut: a.writeFile, http.MethodDelete: a.deleteFile,
	})
	s.Handle("/v1/sandbox/files/list", httpx.Methods{http.MethodGet: a.listFiles})
	s.Handle("/v1/sandbox/files/stat", httpx.Methods{http.MethodGet: a.statFile})
	s.Handle("/v1/sandbox/files/mkdir", httpx.Methods{http.MethodPost: a.mkdir})
	s.Handle("/v1/sandbox/files/move", httpx.Methods{http.MethodPost: a.moveFile})
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
	a.f.cfg.Ops.WithLabelValues("stat", "ok").Inc()
	_ = httpx.WriteJSON(w, http.StatusOK, info)
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
	if err := a.f.cfg.Host.Check(); err != nil {
		a.fileFail(w, req, "mkdir", err)
		return
	}
	info, created, err := a.root.Mkdir(p, parents)
	if err == nil && created {
		err = a.give(info.Path)
	}
	if err != nil {
		a.fileFail(w, req, "mkdir", err)
		return
	}
	a.f.cfg.Ops.WithLabelValues("mkdir", "ok").Inc()
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	_ = httpx.WriteJSON(w, status, info)
}

func (a *api) moveFile(w http.ResponseWriter, req *http.Request) {
	m, err := wire.DecodeFileMove(req.Body)
	if err != nil {
		a.fileFail(w, req, "move", err)
		return
	}
	info, err := a.root.Move(m.From, m.To, workspace.MoveOptions{Overwrite: m.Overwrite, Parents: m.Parents})
	if err == nil && m.Parents {
		err = a.give(info.Path)
	}
	if err != nil {
		a.fileFail(w, req, "move", err)
		return
	}
	a.f.cfg.Ops.WithLabelValues("move", "ok").Inc()
	_ = httpx.WriteJSON(w, http.StatusOK, info)
}
