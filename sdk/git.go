package warren

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/warren-mesh/warren/internal/wire"
)

// Git in the sandbox (docs/PROTOCOL.md#git): git runs inside the sandbox on a repository of the workspace.
type (
	GitInitRequest     = wire.GitInitRequest
	GitCloneRequest    = wire.GitCloneRequest
	GitCredential      = wire.GitCredential
	GitCommitRequest   = wire.GitCommitRequest
	GitBranchRequest   = wire.GitBranchRequest
	GitCheckoutRequest = wire.GitCheckoutRequest
	GitHead            = wire.GitHead
	GitStatus          = wire.GitStatus
	GitStatusEntry     = wire.GitStatusEntry
	GitLog             = wire.GitLog
	GitLogEntry        = wire.GitLogEntry
	GitDiff            = wire.GitDiff
)

func (s *Sandbox) gitPost(ctx context.Context, op string, req any) (*GitHead, error) {
	var h GitHead
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandbox/git/"+op, nil, req, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// GitInit makes a repository (git init) at req.Path, made if missing.
func (s *Sandbox) GitInit(ctx context.Context, req GitInitRequest) (*GitHead, error) {
	return s.gitPost(ctx, "init", req)
}

// GitClone clones req.URL (https, http or git) into req.Path. req.Credential, if set, is used for this
// clone only and never stored in the sandbox.
func (s *Sandbox) GitClone(ctx context.Context, req GitCloneRequest) (*GitHead, error) {
	return s.gitPost(ctx, "clone", req)
}

// GitCommit stages (req.All, or req.Paths) and commits. The author is the token's user unless given.
func (s *Sandbox) GitCommit(ctx context.Context, req GitCommitRequest) (*GitHead, error) {
	return s.gitPost(ctx, "commit", req)
}

// GitBranch makes a branch at req.Start (default HEAD) without checking it out.
func (s *Sandbox) GitBranch(ctx context.Context, req GitBranchRequest) (*GitHead, error) {
	return s.gitPost(ctx, "branch", req)
}

// GitCheckout checks out req.Ref, or with req.Create a new branch req.Ref at req.Start.
func (s *Sandbox) GitCheckout(ctx context.Context, req GitCheckoutRequest) (*GitHead, error) {
	return s.gitPost(ctx, "checkout", req)
}

// GitStatus is the status of the repository at path.
func (s *Sandbox) GitStatus(ctx context.Context, path string) (*GitStatus, error) {
	var st GitStatus
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/git/status", pathQuery(path), nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// GitDiffOptions selects a diff: against Base (a revision) instead of the index, or the index (Staged).
type GitDiffOptions struct {
	Base   string
	Staged bool
}

// GitDiff is the diff of the repository at path.
func (s *Sandbox) GitDiff(ctx context.Context, path string, opt GitDiffOptions) (*GitDiff, error) {
	q := pathQuery(path)
	if opt.Base != "" {
		q.Set("base", opt.Base)
	}
	if opt.Staged {
		q.Set("staged", "true")
	}
	var d GitDiff
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/git/diff", q, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// GitLog lists the commits reachable from ref ("" is HEAD), newest first, at most limit (0: the server's
// default, 100).
func (s *Sandbox) GitLog(ctx context.Context, path, ref string, limit int) (*GitLog, error) {
	q := pathQuery(path)
	if ref != "" {
		q.Set("ref", ref)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var l GitLog
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/git/log", q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// GitBundle streams a git bundle of ref ("" is HEAD) with the commits since base (a revision the receiver
// has; "" is the whole history) from the repository at path. Nothing new since base is a not_found error.
// The caller must close the reader.
func (s *Sandbox) GitBundle(ctx context.Context, path, base, ref string) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if base != "" {
		q.Set("base", base)
	}
	if ref != "" {
		q.Set("ref", ref)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.endpoint("/v1/sandbox/git/bundle", q), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-git-bundle")
	resp, err := s.c.do(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
