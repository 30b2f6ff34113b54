package wire

// Git shapes of the sandbox API (docs/PROTOCOL.md#git): git run inside the sandbox on a repository of the
// workspace. Every Path is a directory relative to the workspace root ("" or "." is the root).

// GitInitRequest is the body of POST /v1/sandbox/git/init.
type GitInitRequest struct {
	Path   string `json:"path,omitempty"`
	Branch string `json:"branch,omitempty"` // the initial branch (default main)
}

// GitCredential authenticates one clone over HTTP(S): sent as an Authorization header for that call only,
// never written to the repository, the workspace or a log.
type GitCredential struct {
	Username string `json:"username,omitempty"` // default x-access-token (what GitHub and GitLab accept with a token)
	Password string `json:"password"`           // a password or access token
}

// GitCloneRequest is the body of POST /v1/sandbox/git/clone. URL is https://, http:// or git:// (no
// credentials inside it); Path is the new repository's directory (absent or empty).
type GitCloneRequest struct {
	URL        string         `json:"url"`
	Path       string         `json:"path"`
	Branch     string         `json:"branch,omitempty"`
	Depth      int            `json:"depth,omitempty"`
	Credential *GitCredential `json:"credential,omitempty"`
	TimeoutMs  int64          `json:"timeoutMs,omitempty"`
}

// GitCommitRequest is the body of POST /v1/sandbox/git/commit. All stages every change (git add -A) and
// Paths the given paths (relative to the repository) before committing; without either, what is staged is
// committed. The author is the token's user unless AuthorName/AuthorEmail are given.
type GitCommitRequest struct {
	Path        string   `json:"path,omitempty"`
	Message     string   `json:"message"`
	All         bool     `json:"all,omitempty"`
	Paths       []string `json:"paths,omitempty"`
	AuthorName  string   `json:"authorName,omitempty"`
	AuthorEmail string   `json:"authorEmail,omitempty"`
	AllowEmpty  bool     `json:"allowEmpty,omitempty"`
}

// GitBranchRequest is the body of POST /v1/sandbox/git/branch: a new branch Name at Start (default HEAD).
type GitBranchRequest struct {
	Path  string `json:"path,omitempty"`
	Name  string `json:"name"`
	Start string `json:"start,omitempty"`
}

// GitCheckoutRequest is the body of POST /v1/sandbox/git/checkout: Ref (a branch, tag or commit) is checked
// out; with Create a new branch named Ref is made at Start (default HEAD) and checked out.
type GitCheckoutRequest struct {
	Path   string `json:"path,omitempty"`
	Ref    string `json:"ref"`
	Create bool   `json:"create,omitempty"`
	Start  string `json:"start,omitempty"`
}

// GitHead answers init, clone, commit, branch and checkout: the repository's directory, the branch checked
// out ("" when detached) and the commit HEAD names ("" before the first commit).
type GitHead struct {
	Path   string `json:"path"`
	Branch string `json:"branch,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// GitStatusEntry is one changed path of GET /v1/sandbox/git/status. Index and Worktree are git's status
// letters (porcelain v2: . unchanged, M modified, A added, D deleted, R renamed, C copied, U unmerged, ?
// untracked, ! ignored); From is a renamed or copied path's old name.
type GitStatusEntry struct {
	Path     string `json:"path"`
	Index    string `json:"index"`
	Worktree string `json:"worktree"`
	From     string `json:"from,omitempty"`
}

// GitStatus answers GET /v1/sandbox/git/status.
type GitStatus struct {
	Branch    string           `json:"branch,omitempty"` // "" when detached
	Commit    string           `json:"commit,omitempty"` // "" before the first commit
	Upstream  string           `json:"upstream,omitempty"`
	Ahead     int              `json:"ahead,omitempty"`
	Behind    int              `json:"behind,omitempty"`
	Clean     bool             `json:"clean"`
	Entries   []GitStatusEntry `json:"entries"`
	Truncated bool             `json:"truncated,omitempty"`
}

// GitLogEntry is one commit of GET /v1/sandbox/git/log.
type GitLogEntry struct {
	Commit      string   `json:"commit"`
	Parents     []string `json:"parents,omitempty"`
	AuthorName  string   `json:"authorName"`
	AuthorEmail string   `json:"authorEmail"`
	Time        int64    `json:"time"` // author time, Unix seconds
	Subject     string   `json:"subject"`
}

// GitLog answers GET /v1/sandbox/git/log, newest first.
type GitLog struct {
	Commits   []GitLogEntry `json:"commits"`
	Truncated bool          `json:"truncated,omitempty"`
}

// GitDiff answers GET /v1/sandbox/git/diff: a unified diff, cut at the size cap (Truncated).
type GitDiff struct {
	Diff      string `json:"diff"`
	Truncated bool   `json:"truncated,omitempty"`
}
