package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("git", "git in your sandbox: warren git init|clone|status|diff|log|commit|branch|checkout|bundle", runGit)
}

const gitUsage = `usage: warren git [-url U] [-token T] [-path P] COMMAND ...

commands (git runs inside the sandbox, on the repository at -path, default the workspace root):
  init [-branch B]                                  make a repository (the directory is made if missing)
  clone [-branch B] [-depth N] [-username U] [-password-stdin] URL
                                                    clone an https/http/git URL into -path; with
                                                    -password-stdin (or $WARREN_GIT_PASSWORD) the password
                                                    or token is used for this clone only, never stored
  status [-json]                                    changed paths
  diff [-base REV] [-staged]                        the working tree (or index) against the index (or REV)
  log [-ref R] [-n N] [-json]                       commits, newest first
  commit -m MSG [-a] [-author-name N] [-author-email E] [PATH...]
                                                    commit (everything with -a, or PATHs, or what is staged)
  branch NAME [START]                               make a branch
  checkout [-b] REF [START]                         check out REF, or with -b a new branch REF at START
  bundle [-base REV] [-ref R] -o FILE               a git bundle of the commits since REV

'warren pull' fetches such a bundle into the repository of the current directory.
`

// gitCLI carries what every git subcommand needs.
type gitCLI struct {
	cf     *clientFlags
	sb     *warren.Sandbox
	pathp  *string // -path, given before or after the subcommand's name
	path   string
	stdout io.Writer
	stderr io.Writer
}

// repoFlagSet is the flag set of warren git and warren pull: the client flags and -path.
func repoFlagSet(name, usage string, stderr io.Writer) (*flag.FlagSet, *clientFlags, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags()
	cf.register(fs)
	path := fs.String("path", "", "the repository's directory in the sandbox, relative to the workspace root")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(usage+"\nflags:\n", ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	return fs, cf, path
}

func runGit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf, path := repoFlagSet("git", gitUsage, stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no command given")
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	run, ok := map[string]func(context.Context, *gitCLI, *flag.FlagSet, []string) error{
		"init": gitInit, "clone": gitClone, "status": gitStatus, "diff": gitDiff, "log": gitLog,
		"commit": gitCommit, "branch": gitBranch, "checkout": gitCheckout, "bundle": gitBundle,
	}[sub]
	if !ok {
		fs.Usage()
		return fmt.Errorf("unknown command %q", sub)
	}
	sfs := flag.NewFlagSet("git "+sub, flag.ContinueOnError)
	sfs.SetOutput(stderr)
	help.Set(sfs, "usage: warren git "+sub+" [flags] [arguments]\n\nSee 'warren git -h' for its arguments.")
	cf.register(sfs)
	sfs.StringVar(path, "path", *path, "the repository's directory in the sandbox")
	g := &gitCLI{cf: cf, pathp: path, stdout: stdout, stderr: stderr}
	// Each subcommand defines its flags, then parses them and connects with g.parse.
	return run(ctx, g, sfs, rest)
}

// parse parses the subcommand's flags and connects.
func (g *gitCLI) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	g.path = *g.pathp
	c, err := g.cf.client()
	if err != nil {
		return err
	}
	g.sb = c.Sandbox()
	return nil
}

// printHead prints "path branch commit" of h, or returns err.
func (g *gitCLI) printHead(h *warren.GitHead, err error) error {
	if err != nil {
		return err
	}
	branch := h.Branch
	if branch == "" {
		branch = "(detached)"
	}
	commit := h.Commit
	if commit == "" {
		commit = "(no commits)"
	}
	fmt.Fprintf(g.stdout, "%s %s %s\n", h.Path, branch, commit)
	return nil
}

func gitInit(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	branch := fs.String("branch", "", "the initial branch (default main)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	return g.printHead(g.sb.GitInit(ctx, warren.GitInitRequest{Path: g.path, Branch: *branch}))
}

func gitClone(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	branch := fs.String("branch", "", "the branch to check out")
	depth := fs.Int("depth", 0, "a shallow clone of this many commits")
	user := fs.String("username", "", "the username of the credential (default x-access-token)")
	pwStdin := fs.Bool("password-stdin", false, "read the password or token from standard input (else $WARREN_GIT_PASSWORD, if set)")
	timeout := fs.Duration("timeout", 0, "give up after this long (default the server's, 60s; at most 10m)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: warren git -path DIR clone [flags] URL")
	}
	req := warren.GitCloneRequest{URL: fs.Arg(0), Path: g.path, Branch: *branch, Depth: *depth, TimeoutMs: timeout.Milliseconds()}
	pw := os.Getenv("WARREN_GIT_PASSWORD")
	if *pwStdin {
		b, err := io.ReadAll(io.LimitReader(clientStdin, 8<<10))
		if err != nil {
			return fmt.Errorf("read the password: %w", err)
		}
		pw = strings.TrimRight(string(b), "\r\n")
	}
	if pw != "" {
		req.Credential = &warren.GitCredential{Username: *user, Password: pw}
	}
	return g.printHead(g.sb.GitClone(ctx, req))
}

func gitStatus(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	st, err := g.sb.GitStatus(ctx, g.path)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(g.stdout).Encode(st)
	}
	branch := st.Branch
	if branch == "" {
		branch = "(detached)"
	}
	fmt.Fprintf(g.stdout, "## %s %s\n", branch, st.Commit)
	for _, e := range st.Entries {
		if e.From != "" {
			fmt.Fprintf(g.stdout, "%s%s %s -> %s\n", e.Index, e.Worktree, e.From, e.Path)
			continue
		}
		fmt.Fprintf(g.stdout, "%s%s %s\n", e.Index, e.Worktree, e.Path)
	}
	return nil
}

func gitDiff(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	base := fs.String("base", "", "compare with this revision instead of the index")
	staged := fs.Bool("staged", false, "the index instead of the working tree")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	d, err := g.sb.GitDiff(ctx, g.path, warren.GitDiffOptions{Base: *base, Staged: *staged})
	if err != nil {
		return err
	}
	fmt.Fprint(g.stdout, d.Diff)
	if d.Truncated {
		fmt.Fprintln(g.stderr, "warren git diff: the diff was cut at the server's size cap")
	}
	return nil
}

func gitLog(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	ref := fs.String("ref", "", "list from this revision (default HEAD)")
	n := fs.Int("n", 0, "at most this many commits (default 100, at most 1000)")
	asJSON := fs.Bool("json", false, "print the log as JSON")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	l, err := g.sb.GitLog(ctx, g.path, *ref, *n)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(g.stdout).Encode(l)
	}
	for _, c := range l.Commits {
		fmt.Fprintf(g.stdout, "%s %s %s <%s> %s\n", c.Commit[:min(12, len(c.Commit))],
			time.Unix(c.Time, 0).UTC().Format("2006-01-02"), c.AuthorName, c.AuthorEmail, c.Subject)
	}
	return nil
}

func gitCommit(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	msg := fs.String("m", "", "the commit message (required)")
	all := fs.Bool("a", false, "stage every change first (git add -A)")
	name := fs.String("author-name", "", "the author (default your token's user)")
	email := fs.String("author-email", "", "the author's email")
	allowEmpty := fs.Bool("allow-empty", false, "commit even when nothing changed")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	return g.printHead(g.sb.GitCommit(ctx, warren.GitCommitRequest{Path: g.path, Message: *msg, All: *all, Paths: fs.Args(),
		AuthorName: *name, AuthorEmail: *email, AllowEmpty: *allowEmpty}))
}

func gitBranch(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return errors.New("usage: warren git branch NAME [START]")
	}
	return g.printHead(g.sb.GitBranch(ctx, warren.GitBranchRequest{Path: g.path, Name: fs.Arg(0), Start: fs.Arg(1)}))
}

func gitCheckout(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	create := fs.Bool("b", false, "make a new branch REF (at START) and check it out")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 || fs.NArg() == 2 && !*create {
		return errors.New("usage: warren git checkout REF, or checkout -b NAME [START]")
	}
	return g.printHead(g.sb.GitCheckout(ctx, warren.GitCheckoutRequest{Path: g.path, Ref: fs.Arg(0), Create: *create, Start: fs.Arg(1)}))
}

func gitBundle(ctx context.Context, g *gitCLI, fs *flag.FlagSet, args []string) error {
	base := fs.String("base", "", "the commits since this revision (default: the whole history)")
	ref := fs.String("ref", "", "the revision bundled (default HEAD)")
	out := fs.String("o", "", "the bundle file to write (- for standard output; required)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-o FILE is required")
	}
	body, err := g.sb.GitBundle(ctx, g.path, *base, *ref)
	if err != nil {
		return err
	}
	defer body.Close()
	if *out == "-" {
		_, err = io.Copy(g.stdout, body)
		return err
	}
	return writeFileAtomic(*out, body)
}

// writeFileAtomic writes r to a temporary file beside name and renames it into place.
func writeFileAtomic(name string, r io.Reader) error {
	f, err := os.CreateTemp(dirOf(name), ".warren-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

func dirOf(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i+1]
	}
	return "."
}
