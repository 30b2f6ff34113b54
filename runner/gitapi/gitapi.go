// Package gitapi is the git routes of docs/PROTOCOL.md#git: the git binary run inside the sandbox through
// its Host (the same boundary, exec slots, disk checks and metering as exec) on a repository of the
// workspace. Everything the client sends is validated before git runs (valid.go, fuzzed): repository paths
// go through runner/workspace, revisions and branch names never start with "-" and are passed after
// --end-of-options or before "--", clone URLs are https, http or git URLs without credentials. Outputs are
// bounded, every run has a timeout.
package gitapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/text"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/workspace"
)

const (
	maxGitBody      = 1 << 20  // JSON body of a git POST
	maxGitDiff      = 4 << 20  // diff text kept
	maxGitListing   = 8 << 20  // status and log output read
	maxGitStderr    = 64 << 10 // stderr kept for the error message
	maxGitEntries   = 10_000   // status entries answered
	defaultGitLog   = 100      // commits answered by default
	maxGitLog       = 1000     // commits answered at most
	maxCommitPaths  = 1000
	maxCommitMsg    = 64 << 10
	gitAuthorDomain = "warren.invalid"
)

// gitBaseArgs come first on every git command line. Command-line configuration outranks every file the
// tenant controls: no hooks, no fsmonitor program, no pager, no automatic gc left running, no credential
// helper (a clone's credential must not reach one that stores it), and only the https, http and git
// transports (never ext::, file:// or ssh).
var gitBaseArgs = []string{
	"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.pager=cat",
	"-c", "color.ui=false", "-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "credential.helper=",
	"-c", "submodule.recurse=false", "-c", "advice.detachedHead=false",
	"-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.http.allow=always",
	"-c", "protocol.git.allow=always",
}

// Host is what git uses of the runner. Run may be called concurrently.
type Host interface {
	// Run runs a command in the sandbox to its end as exec does (an exec slot, the disk check, metering);
	// an error from a cancelled context is unavailable.
	Run(ctx context.Context, spec isolate.Spec) (isolate.Result, error)
}

// Config is what the git routes are built with.
type Config struct {
	Host    Host
	Metrics prometheus.Registerer
	// Insecure: commands run without a sandbox, so git must not look for a repository above Workspace
	// (the host's directories are right there).
	Insecure  bool
	Workspace string
	// DefaultTimeout applies to a run whose request gives none; MaxTimeout caps a clone's and a bundle's.
	DefaultTimeout, MaxTimeout time.Duration
	// User and Issuer make the default commit author.
	User, Issuer string
	// SpoolDir holds bundles being downloaded (the runner's state directory; "": the system's temporary
	// directory); MaxFileSize bounds a bundle.
	SpoolDir    string
	MaxFileSize int64
}

// API serves the git routes. Create it with New.
type API struct {
	cfg     Config
	ops     *prometheus.CounterVec
	bundles chan struct{} // one per bundle spooled or being sent (maxBundles)
}

// gitAPI is the git routes of one Run, on its workspace.
type gitAPI struct {
	*API
	root *workspace.Root
}

// maxBundles bounds the bundles a sandbox has spooled at once. A spool is a file of the runner's state
// directory, outside the workspace's quota, of up to MaxFileSize, kept until its download ends: without
// a bound, a tenant reading each download slowly (git's exec slot is free once the bundle is written)
// held any number of them, filling the host's disk.
const maxBundles = 2

// New makes the git routes and registers their metrics in cfg.Metrics.
func New(cfg Config) *API {
	g := &API{cfg: cfg, bundles: make(chan struct{}, maxBundles), ops: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_runner_git_total",
		Help: "Git operations of the sandbox API, by operation and outcome (ok or the wire error code).",
	}, []string{"op", "outcome"})}
	cfg.Metrics.MustRegister(g.ops)
	return g
}

// Busy is false: a git request keeps the sandbox awake as any request does, and nothing outlives it.
func (*API) Busy(time.Time) bool { return false }

// Close has nothing to end: every git command belongs to its request.
func (*API) Close(context.Context) error { return nil }

// Routes mounts the git routes on s.
func (api *API) Routes(s web.Serve) {
	g := &gitAPI{API: api, root: s.Root}
	s.Handle("/v1/sandbox/git/init", httpx.Methods{http.MethodPost: gitPost(g, "init", g.init)})
	s.Handle("/v1/sandbox/git/clone", httpx.Methods{http.MethodPost: gitPost(g, "clone", g.clone)})
	s.Handle("/v1/sandbox/git/status", httpx.Methods{http.MethodGet: gitGet(g, "status", g.status)})
	s.Handle("/v1/sandbox/git/diff", httpx.Methods{http.MethodGet: gitGet(g, "diff", g.diff)})
	s.Handle("/v1/sandbox/git/log", httpx.Methods{http.MethodGet: gitGet(g, "log", g.log)})
	s.Handle("/v1/sandbox/git/commit", httpx.Methods{http.MethodPost: gitPost(g, "commit", g.commit)})
	s.Handle("/v1/sandbox/git/branch", httpx.Methods{http.MethodPost: gitPost(g, "branch", g.branch)})
	s.Handle("/v1/sandbox/git/checkout", httpx.Methods{http.MethodPost: gitPost(g, "checkout", g.checkout)})
	s.Handle("/v1/sandbox/git/bundle", httpx.Methods{http.MethodGet: g.bundle})
}

// gitRun is one git command.
type gitRun struct {
	dir     string // working directory, relative to the workspace (already confined)
	args    []string
	env     map[string]string
	stdin   io.Reader
	stdout  io.Writer // nil: kept (up to maxGitListing) and returned
	timeout time.Duration
	secret  string // scrubbed from error messages
}

// run runs git inside the sandbox. A nonzero exit is a wire error made from git's message (gitFailure).
func (g *gitAPI) run(ctx context.Context, r gitRun) ([]byte, bool, error) {
	env := map[string]string{
		"GIT_TERMINAL_PROMPT":   "0",
		"GIT_CONFIG_NOSYSTEM":   "1",
		"GIT_PAGER":             "cat",
		"GIT_LITERAL_PATHSPECS": "1",
		"GIT_OPTIONAL_LOCKS":    "0",
		"GIT_ASKPASS":           "",
		"SSH_ASKPASS":           "",
		// git looks for the repository upwards from the working directory: never above the workspace (in
		// insecure mode the host's directories are right there).
		"GIT_CEILING_DIRECTORIES": "/",
	}
	if g.cfg.Insecure {
		env["GIT_CEILING_DIRECTORIES"] = filepath.Dir(g.cfg.Workspace)
	}
	for k, v := range r.env {
		env[k] = v
	}
	out := &text.Capped{Max: maxGitListing}
	stderr := &text.Capped{Max: maxGitStderr}
	spec := isolate.Spec{
		Command: "git", Args: append(append([]string{}, gitBaseArgs...), r.args...), Dir: r.dir, Env: env,
		Stdin: r.stdin, Stdout: r.stdout, Stderr: stderr, Timeout: r.timeout,
	}
	if spec.Timeout <= 0 {
		spec.Timeout = g.cfg.DefaultTimeout
	}
	if spec.Stdout == nil {
		spec.Stdout = out
	}
	if err := isolate.Validate(spec); err != nil {
		return nil, false, err
	}
	res, err := g.cfg.Host.Run(ctx, spec)
	if err != nil {
		return nil, false, err
	}
	if res.TimedOut {
		return nil, false, wire.Errorf(wire.Timeout, "git %s timed out after %s", r.args[0], spec.Timeout)
	}
	if res.ExitCode != 0 {
		return nil, false, gitFailure(r.args[0], res.ExitCode, stderr.String(), r.secret)
	}
	return out.Bytes(), out.Truncated(), nil
}

// gitFailure turns a failed git command into a wire error carrying git's message (its last lines, at most
// 1 KiB, with the secret of the call, if any, blotted out).
func gitFailure(op string, exit int, stderr, secret string) error {
	msg := strings.TrimSpace(stderr)
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, "***")
	}
	if len(msg) > 1024 {
		msg = "…" + text.Truncate(msg[len(msg)-1024:], 1024)
	}
	if msg == "" {
		msg = "exit status " + strconv.Itoa(exit)
	}
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	code := wire.InvalidArgument
	switch {
	case has("not a git repository"):
		code = wire.NotFound
	case has("Authentication failed", "could not read Username", "could not read Password", "returned error: 401", "returned error: 403"):
		code = wire.PermissionDenied
	case has("Could not resolve host", "Failed to connect", "Connection refused", "Could not read from remote", "Connection timed out", "unable to access"):
		code = wire.Unavailable
	case has("unknown revision", "bad revision", "invalid reference", "did not match any", "Needed a single revision",
		"ambiguous argument", "not a valid object name", "not found in upstream", "does not have any commits"):
		code = wire.NotFound
	case has("already exists", "nothing to commit", "no changes added to commit", "would be overwritten", "CONFLICT", "unmerged"):
		code = wire.Conflict
	}
	return wire.Errorf(code, "git %s: %s", op, msg)
}

// readGitBody decodes a JSON body of at most maxGitBody bytes into v.
func readGitBody(w http.ResponseWriter, req *http.Request, v any) error {
	if err := strictjson.Read(http.MaxBytesReader(w, req.Body, maxGitBody), v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return wire.Errorf(wire.PayloadTooLarge, "git request exceeds %d bytes", maxGitBody)
		}
		return wire.JSONError(err, "git request")
	}
	return nil
}

// gitPost serves a POST route: the JSON body decoded into a T, handed to fn, its answer or error written.
func gitPost[T any](g *gitAPI, op string, fn func(context.Context, *T) (wire.GitHead, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var (
			r T
			h wire.GitHead
		)
		err := readGitBody(w, req, &r)
		if err == nil {
			h, err = fn(req.Context(), &r)
		}
		g.done(w, req, op, h, err)
	}
}

// gitGet serves a GET route on the repository at ?path=: fn's answer or error written.
func gitGet[T any](g *gitAPI, op string, fn func(context.Context, url.Values, string) (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var v T
		q := req.URL.Query()
		dir, err := g.repoDir(q.Get("path"))
		if err == nil {
			v, err = fn(req.Context(), q, dir)
		}
		g.done(w, req, op, v, err)
	}
}

// done answers v or err, counting the operation.
func (g *gitAPI) done(w http.ResponseWriter, req *http.Request, op string, v any, err error) {
	if err != nil {
		g.ops.WithLabelValues(op, string(wire.CodeOf(err))).Inc()
		web.Fail(w, req, err)
		return
	}
	g.ops.WithLabelValues(op, "ok").Inc()
	_ = httpx.WriteJSON(w, http.StatusOK, v)
}

// newDir checks p for a directory git may create (init, clone): inside the workspace, its nearest existing
// ancestor a directory, itself absent or a directory (git refuses a non-empty one itself). Symlinks leading out are
// refused by runner/workspace.
func (g *gitAPI) newDir(p string) (string, error) {
	c, err := workspace.Clean(p)
	if err != nil {
		return "", err
	}
	// The nearest existing ancestor must be a directory inside (git makes the missing ones).
	for p := path.Dir(c); ; p = path.Dir(p) {
		_, err := g.root.Dir(p)
		if err == nil {
			break
		}
		if wire.CodeOf(err) != wire.NotFound || p == "." {
			return "", err
		}
	}
	if _, err := g.root.Dir(c); err != nil {
		switch wire.CodeOf(err) {
		case wire.NotFound:
		case wire.InvalidArgument:
			return "", wire.Errorf(wire.Conflict, "%s exists and is not a directory", c)
		default:
			return "", err
		}
	}
	return c, nil
}

// head is what HEAD of the repository at dir names: its branch and commit.
func (g *gitAPI) head(ctx context.Context, dir string) (wire.GitHead, error) {
	out, _, err := g.run(ctx, gitRun{dir: dir, args: []string{"status", "--porcelain=v2", "--branch", "-z", "--untracked-files=no", "--ignore-submodules=all"}})
	if err != nil {
		return wire.GitHead{}, err
	}
	st, err := parseGitStatus(out, 0)
	if err != nil {
		return wire.GitHead{}, err
	}
	return wire.GitHead{Path: dir, Branch: st.Branch, Commit: st.Commit}, nil
}

// init serves POST /v1/sandbox/git/init: git init (the directory is made if missing; an existing repository
// is left as it is).
func (g *gitAPI) init(ctx context.Context, r *wire.GitInitRequest) (wire.GitHead, error) {
	branch := r.Branch
	if branch == "" {
		branch = "main"
	}
	if err := validBranch(branch); err != nil {
		return wire.GitHead{}, err
	}
	dir, err := g.newDir(r.Path)
	if err != nil {
		return wire.GitHead{}, err
	}
	if _, _, err := g.run(ctx, gitRun{args: []string{"init", "-q", "--initial-branch=" + branch, "--", dir}}); err != nil {
		return wire.GitHead{}, err
	}
	return g.head(ctx, dir)
}

// clone serves POST /v1/sandbox/git/clone. A credential travels to git in its environment as an
// Authorization header (GIT_CONFIG_COUNT), for this call only: nothing stores it, redirects are not
// followed (they would carry it elsewhere), and it is blotted out of error messages.
func (g *gitAPI) clone(ctx context.Context, r *wire.GitCloneRequest) (wire.GitHead, error) {
	if err := validCloneURL(r.URL); err != nil {
		return wire.GitHead{}, err
	}
	if r.Branch != "" {
		if err := validBranch(r.Branch); err != nil {
			return wire.GitHead{}, err
		}
	}
	if r.Depth < 0 || r.Depth > 1_000_000 {
		return wire.GitHead{}, wire.Errorf(wire.InvalidArgument, "depth must be between 0 and 1000000")
	}
	if r.TimeoutMs < 0 {
		return wire.GitHead{}, wire.Errorf(wire.InvalidArgument, "timeoutMs must not be negative")
	}
	dir, err := g.newDir(r.Path)
	if err != nil {
		return wire.GitHead{}, err
	}
	if dir == "." {
		return wire.GitHead{}, wire.Errorf(wire.InvalidArgument, "path is required: the clone's directory inside the workspace")
	}
	run := gitRun{timeout: g.cfg.DefaultTimeout, env: map[string]string{}}
	if r.TimeoutMs > 0 {
		run.timeout = min(time.Duration(r.TimeoutMs)*time.Millisecond, g.cfg.MaxTimeout)
	}
	if r.Credential != nil {
		header, err := credentialHeader(*r.Credential)
		if err != nil {
			return wire.GitHead{}, err
		}
		run.secret = r.Credential.Password
		run.env["GIT_CONFIG_COUNT"] = "2"
		run.env["GIT_CONFIG_KEY_0"] = "http.extraHeader"
		run.env["GIT_CONFIG_VALUE_0"] = header
		run.env["GIT_CONFIG_KEY_1"] = "http.followRedirects"
		run.env["GIT_CONFIG_VALUE_1"] = "false"
	}
	run.args = []string{"clone", "-q", "--no-recurse-submodules"}
	if r.Branch != "" {
		run.args = append(run.args, "--branch", r.Branch)
	}
	if r.Depth > 0 {
		run.args = append(run.args, "--depth", strconv.Itoa(r.Depth))
	}
	run.args = append(run.args, "--", r.URL, dir)
	if _, _, err := g.run(ctx, run); err != nil {
		return wire.GitHead{}, err
	}
	return g.head(ctx, dir)
}

// credentialHeader is the Authorization header of a credential (HTTP basic).
func credentialHeader(c wire.GitCredential) (string, error) {
	if c.Username == "" {
		c.Username = "x-access-token"
	}
	if err := validCredential(c); err != nil {
		return "", err
	}
	return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password)), nil
}

// repoDir is the ?path= (or body) repository directory: an existing directory of the workspace.
func (g *gitAPI) repoDir(p string) (string, error) { return g.root.Dir(p) }

// status serves GET /v1/sandbox/git/status?path=.
func (g *gitAPI) status(ctx context.Context, q url.Values, dir string) (wire.GitStatus, error) {
	out, truncated, err := g.run(ctx, gitRun{dir: dir, args: []string{"status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"}})
	if err != nil {
		return wire.GitStatus{}, err
	}
	if truncated {
		out = out[:bytes.LastIndexByte(out, 0)+1]
	}
	st, err := parseGitStatus(out, maxGitEntries)
	st.Truncated = st.Truncated || truncated
	return st, err
}

// diff serves GET /v1/sandbox/git/diff?path=&base=&staged=: the working tree (or with staged=true the index)
// against the index (or base, a revision).
func (g *gitAPI) diff(ctx context.Context, q url.Values, dir string) (wire.GitDiff, error) {
	args := []string{"diff", "--no-color", "--no-ext-diff", "--no-textconv"}
	if v := q.Get("staged"); v != "" {
		staged, err := strconv.ParseBool(v)
		if err != nil {
			return wire.GitDiff{}, wire.Errorf(wire.InvalidArgument, "staged must be true or false")
		}
		if staged {
			args = append(args, "--cached")
		}
	}
	if base := q.Get("base"); base != "" {
		if err := validRev(base); err != nil {
			return wire.GitDiff{}, err
		}
		args = append(args, "--end-of-options", base)
	}
	args = append(args, "--")
	buf := &text.Capped{Max: maxGitDiff}
	if _, _, err := g.run(ctx, gitRun{dir: dir, args: args, stdout: buf}); err != nil {
		return wire.GitDiff{}, err
	}
	return wire.GitDiff{Diff: buf.String(), Truncated: buf.Truncated()}, nil
}

// log serves GET /v1/sandbox/git/log?path=&ref=&limit=: commits reachable from ref (default HEAD), newest
// first, at most limit (default 100, at most 1000). A repository without commits has an empty log.
func (g *gitAPI) log(ctx context.Context, q url.Values, dir string) (wire.GitLog, error) {
	ref := q.Get("ref")
	if ref == "" {
		ref = "HEAD"
	}
	if err := validRev(ref); err != nil {
		return wire.GitLog{}, err
	}
	limit := defaultGitLog
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxGitLog {
			return wire.GitLog{}, wire.Errorf(wire.InvalidArgument, "limit must be between 1 and %d", maxGitLog)
		}
		limit = n
	}
	out, truncated, err := g.run(ctx, gitRun{dir: dir, args: []string{
		"log", "-z", "--no-color", "--format=" + gitLogFormat, "-n", strconv.Itoa(limit + 1), "--end-of-options", ref, "--",
	}})
	if err != nil {
		if ref == "HEAD" && wire.CodeOf(err) == wire.NotFound {
			if h, herr := g.head(ctx, dir); herr == nil && h.Commit == "" {
				return wire.GitLog{Commits: []wire.GitLogEntry{}}, nil // no commits yet
			}
		}
		return wire.GitLog{}, err
	}
	if truncated {
		out = out[:bytes.LastIndexByte(out, 0)+1]
	}
	commits, err := parseGitLog(out, truncated)
	if err != nil {
		return wire.GitLog{}, err
	}
	l := wire.GitLog{Commits: commits, Truncated: truncated}
	if len(commits) > limit {
		l.Commits, l.Truncated = commits[:limit], true
	}
	return l, nil
}

// commit serves POST /v1/sandbox/git/commit: stage (all, or the paths), then commit with the message.
func (g *gitAPI) commit(ctx context.Context, r *wire.GitCommitRequest) (wire.GitHead, error) {
	if err := validCommitMessage(r.Message); err != nil {
		return wire.GitHead{}, err
	}
	name, email := r.AuthorName, r.AuthorEmail
	if name == "" {
		name = identPart(g.cfg.User)
	}
	if email == "" {
		email = identPart(g.cfg.User) + "@" + identPart(g.cfg.Issuer) + "." + gitAuthorDomain
	}
	if err := validIdent("authorName", name); err != nil {
		return wire.GitHead{}, err
	}
	if err := validIdent("authorEmail", email); err != nil {
		return wire.GitHead{}, err
	}
	if len(r.Paths) > maxCommitPaths {
		return wire.GitHead{}, wire.Errorf(wire.InvalidArgument, "at most %d paths", maxCommitPaths)
	}
	paths := make([]string, len(r.Paths))
	for i, p := range r.Paths {
		// Relative to the repository and inside it: git is handed the cleaned form after "--".
		c, err := workspace.Clean(p)
		if err != nil {
			return wire.GitHead{}, err
		}
		paths[i] = c
	}
	dir, err := g.repoDir(r.Path)
	if err != nil {
		return wire.GitHead{}, err
	}
	switch {
	case r.All:
		if _, _, err := g.run(ctx, gitRun{dir: dir, args: []string{"add", "-A", "--", "."}}); err != nil {
			return wire.GitHead{}, err
		}
	case len(paths) > 0:
		if _, _, err := g.run(ctx, gitRun{dir: dir, args: append([]string{"add", "-A", "--"}, paths...)}); err != nil {
			return wire.GitHead{}, err
		}
	}
	args := []string{"commit", "-q", "--no-verify", "-F", "-"}
	if r.AllowEmpty {
		args = append(args, "--allow-empty")
	}
	env := map[string]string{
		"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
	}
	if _, _, err := g.run(ctx, gitRun{dir: dir, args: args, env: env, stdin: strings.NewReader(r.Message)}); err != nil {
		return wire.GitHead{}, err
	}
	return g.head(ctx, dir)
}

// branch serves POST /v1/sandbox/git/branch: a new branch at start (default HEAD); HEAD does not move.
func (g *gitAPI) branch(ctx context.Context, r *wire.GitBranchRequest) (wire.GitHead, error) {
	if err := validBranch(r.Name); err != nil {
		return wire.GitHead{}, err
	}
	args := []string{"branch", "--end-of-options", r.Name}
	if r.Start != "" {
		if err := validRev(r.Start); err != nil {
			return wire.GitHead{}, err
		}
		args = append(args, r.Start)
	}
	dir, err := g.repoDir(r.Path)
	if err != nil {
		return wire.GitHead{}, err
	}
	if _, _, err := g.run(ctx, gitRun{dir: dir, args: args}); err != nil {
		return wire.GitHead{}, err
	}
	out, _, err := g.run(ctx, gitRun{dir: dir, args: []string{"rev-parse", "--verify", "--end-of-options", "refs/heads/" + r.Name}})
	if err != nil {
		return wire.GitHead{}, err
	}
	return wire.GitHead{Path: dir, Branch: r.Name, Commit: strings.TrimSpace(string(out))}, nil
}

// checkout serves POST /v1/sandbox/git/checkout: ref checked out (a branch, or a detached commit), or with
// create a new branch named ref at start checked out.
func (g *gitAPI) checkout(ctx context.Context, r *wire.GitCheckoutRequest) (wire.GitHead, error) {
	var args []string
	if r.Create {
		if err := validBranch(r.Ref); err != nil {
			return wire.GitHead{}, err
		}
		args = []string{"switch", "-c", r.Ref, "--end-of-options"}
		if r.Start != "" {
			if err := validRev(r.Start); err != nil {
				return wire.GitHead{}, err
			}
			args = append(args, r.Start)
		}
	} else {
		if err := validRev(r.Ref); err != nil {
			return wire.GitHead{}, err
		}
		if r.Start != "" {
			return wire.GitHead{}, wire.Errorf(wire.InvalidArgument, "start is only for create")
		}
		// git checkout has no --end-of-options (2.39); ref cannot start with "-" and "--" ends it as a
		// revision, never a path.
		args = []string{"checkout", "-q", r.Ref, "--"}
	}
	dir, err := g.repoDir(r.Path)
	if err != nil {
		return wire.GitHead{}, err
	}
	if _, _, err := g.run(ctx, gitRun{dir: dir, args: args}); err != nil {
		return wire.GitHead{}, err
	}
	return g.head(ctx, dir)
}

// bundle serves GET /v1/sandbox/git/bundle?path=&base=&ref=: a git bundle (application/x-git-bundle) of
// ref (default HEAD) with the commits since base (a revision the receiver has; none: the whole history).
// Nothing new since base is not_found; a bundle larger than MaxFileSize is payload_too_large. The bundle is
// spooled to a file of the runner's state directory first, so a failure is an error, never a cut body.
func (g *gitAPI) bundle(w http.ResponseWriter, req *http.Request) {
	err := func() error {
		q := req.URL.Query()
		dir, err := g.repoDir(q.Get("path"))
		if err != nil {
			return err
		}
		ref, base := q.Get("ref"), q.Get("base")
		if ref == "" {
			ref = "HEAD"
		}
		if err := validRev(ref); err != nil {
			return err
		}
		revs := ref
		if base != "" {
			if err := validRev(base); err != nil {
				return err
			}
			revs = base + ".." + ref
		}
		select {
		case g.bundles <- struct{}{}:
			defer func() { <-g.bundles }()
		default:
			return wire.Errorf(wire.ResourceExhausted, "%d bundles are already being made or downloaded in this sandbox; finish one first", maxBundles)
		}
		tmpDir := g.cfg.SpoolDir
		if tmpDir == "" {
			tmpDir = os.TempDir()
		}
		f, err := os.CreateTemp(tmpDir, "git-bundle-*")
		if err != nil {
			return fmt.Errorf("bundle spool: %w", err)
		}
		defer func() {
			f.Close()
			os.Remove(f.Name())
		}()
		spool := &cappedFile{f: f, max: g.cfg.MaxFileSize}
		timeout := g.cfg.MaxTimeout
		if _, _, err := g.run(req.Context(), gitRun{dir: dir, args: []string{"bundle", "create", "-q", "-", revs}, stdout: spool, timeout: timeout}); err != nil {
			if strings.Contains(err.Error(), "Refusing to create empty bundle") {
				return wire.Errorf(wire.NotFound, "no commits on %s since %s", ref, base)
			}
			return err
		}
		if spool.err != nil {
			return fmt.Errorf("bundle spool: %w", spool.err)
		}
		if spool.over {
			return wire.Errorf(wire.PayloadTooLarge, "the bundle exceeds %d bytes", g.cfg.MaxFileSize)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("bundle spool: %w", err)
		}
		g.ops.WithLabelValues("bundle", "ok").Inc()
		w.Header().Set("Content-Type", "application/x-git-bundle")
		w.Header().Set("Content-Length", strconv.FormatInt(spool.n, 10))
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		if _, err := io.CopyN(w, f, spool.n); err != nil {
			web.Logger(req).Debug("bundle download ended early", "err", err)
		}
		return nil
	}()
	if err != nil {
		g.ops.WithLabelValues("bundle", string(wire.CodeOf(err))).Inc()
		web.Fail(w, req, err)
	}
}

// cappedFile writes to f up to max bytes; past that it records over and drops the rest (the command is
// not blocked).
type cappedFile struct {
	f    *os.File
	max  int64
	n    int64
	over bool
	err  error
}

func (c *cappedFile) Write(p []byte) (int, error) {
	if c.over || c.err != nil {
		return len(p), nil
	}
	if c.n+int64(len(p)) > c.max {
		c.over = true
		return len(p), nil
	}
	k, err := c.f.Write(p)
	c.n += int64(k)
	c.err = err
	return len(p), nil
}
