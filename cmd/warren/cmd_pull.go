package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("pull", "fetch the commits your sandbox made into the local git repository, on branch warren/<user>", runPull)
}

const pullUsage = `usage: warren pull [-url U] [-token T] [-path P] [-base REV] [-ref R] [-branch B]

Fetches a git bundle of the commits the sandbox's repository (at -path) made since -base (default: the
local HEAD commit, which the sandbox's repository must have) into the git repository of the current
directory, on branch -branch (default warren/<your token's user>), which must not be checked out. The
local repository is only fetched into: nothing is merged or checked out.
`

func runPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf, path := repoFlagSet("pull", pullUsage, stderr)
	base := fs.String("base", "", "the commits since this local revision (default HEAD)")
	ref := fs.String("ref", "", "the sandbox's revision fetched (default its HEAD)")
	branch := fs.String("branch", "", "the local branch written (default warren/<user>)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errors.New("no arguments expected")
	}
	if _, err := localGit(ctx, "rev-parse", "--git-dir"); err != nil {
		return fmt.Errorf("the current directory is not in a git repository: %w", err)
	}
	if *base == "" {
		*base = "HEAD"
	}
	baseID, err := localGit(ctx, "rev-parse", "--verify", "--end-of-options", *base+"^{commit}")
	if err != nil {
		return fmt.Errorf("base %q: %w", *base, err)
	}
	if *branch == "" {
		*branch = "warren/" + tokenUser(cf.token)
		if _, err := localGit(ctx, "check-ref-format", "--branch", *branch); err != nil {
			*branch = "warren/sandbox" // a user id that is no branch name
		}
	}
	if _, err := localGit(ctx, "check-ref-format", "--branch", *branch); err != nil || strings.HasPrefix(*branch, "-") {
		return fmt.Errorf("branch %q is not a valid branch name", *branch)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	body, err := c.Sandbox().GitBundle(ctx, *path, baseID, *ref)
	if warren.IsCode(err, wire.NotFound) && strings.Contains(err.Error(), "no commits on") {
		fmt.Fprintf(stdout, "nothing to pull: no commits since %s\n", baseID)
		return nil
	}
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.CreateTemp("", "warren-pull-*.bundle")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	src, done := progress(stderr, body, -1, "pull")
	_, err = io.Copy(f, src)
	done()
	if err != nil {
		f.Close()
		return fmt.Errorf("download the bundle: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if _, err := localGit(ctx, "bundle", "verify", "-q", f.Name()); err != nil {
		return fmt.Errorf("the bundle does not apply to this repository: %w", err)
	}
	// The bundle names the sandbox's revision HEAD; +: the branch is warren's, a later pull replaces it.
	if _, err := localGit(ctx, "fetch", "-q", "--no-tags", "--no-write-fetch-head", f.Name(), "+HEAD:refs/heads/"+*branch); err != nil {
		return err
	}
	tip, err := localGit(ctx, "rev-parse", "--verify", "refs/heads/"+*branch)
	if err != nil {
		return err
	}
	count, err := localGit(ctx, "rev-list", "--count", baseID+".."+tip)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s (%s commits since %s)\n", *branch, tip, count, baseID[:min(12, len(baseID))])
	return nil
}

// localGit runs the local git in the current directory and returns its trimmed output; a failure carries
// git's message.
func localGit(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", args[0], msg)
	}
	return strings.TrimSpace(out.String()), nil
}

// tokenUser is the subject of the token (read, not verified: only a default branch name), or "sandbox".
func tokenUser(tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "sandbox"
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "sandbox"
	}
	var c struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(b, &c) != nil || c.Sub == "" {
		return "sandbox"
	}
	return c.Sub
}
