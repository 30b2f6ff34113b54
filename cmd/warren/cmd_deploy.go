package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"

	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/runner/templates"
)

func init() {
	register("deploy", "upload a directory (or a git ref of it) as the workspace template new sandboxes start from", runDeploy)
	adminCommands["templates ls"] = adminTemplatesList
	adminCommands["templates use"] = adminTemplatesUse
	adminCommands["templates rm"] = adminTemplatesDelete
}

const deployUsage = `usage: warren deploy DIR [-issuer ISS] [-name NAME] [-ref REF] [flags]

Uploads DIR as a new version of the issuer's workspace template NAME (default "default"): every new
sandbox of the issuer (one without a snapshot of its own) starts with these files in /workspace. Existing
sandboxes are not touched. With -ref, DIR must be in a git repository and its tracked files at REF are
uploaded (git archive); without, the directory as it is, .git left out. Prints the version; see
warren admin templates ls|use|rm.

flags:
`

// templatePath is the admin API path of a template.
func templatePath(iss, name string) string {
	return "/v1/admin/templates/" + url.PathEscape(iss) + "/" + url.PathEscape(name)
}

func runDeploy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	af := newAdminFlags()
	fs := af.flagSet("deploy", stderr)
	fs.Init("warren deploy", fs.ErrorHandling())
	iss := fs.String("issuer", "dev", "the issuer (project) whose template this is")
	name := fs.String("name", templates.DefaultName, "the template's name")
	ref := fs.String("ref", "", "a git ref: upload DIR's tracked files at REF (git archive) instead of the directory")
	fs.Usage = func() { fmt.Fprint(stderr, help.Wrap(deployUsage, "")); help.PrintDefaults(fs.Output(), fs) }
	pos, c, err := af.start(ctx, fs, args, "DIR")
	if err != nil {
		return err
	}
	if err := templates.CheckName(*name); err != nil {
		return err
	}
	dir := pos[0]
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	pr, pw := io.Pipe()
	var stderrBuf bytes.Buffer
	go func() {
		if *ref != "" {
			// "REF:./" is the tree of DIR itself at REF, relative to the repository's root.
			cmd := exec.CommandContext(ctx, "git", "-C", dir, "archive", "--format=tar", *ref+":./")
			cmd.Stdout, cmd.Stderr = pw, &stderrBuf
			err := cmd.Run()
			if err != nil {
				err = fmt.Errorf("git archive %s in %s: %w: %s", *ref, dir, err, bytes.TrimSpace(stderrBuf.Bytes()))
			}
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(packDir(dir, pw))
	}()
	var v templates.Version
	body, done := progress(stderr, pr, -1, "deploy "+dir)
	err = c.Upload(ctx, http.MethodPut, templatePath(*iss, *name), "application/x-tar", body, &v)
	done()
	pr.Close()
	if err != nil {
		return asAdminError(err)
	}
	if af.json {
		return printJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "deployed template %s of %s: version %s (%d files, %s; uploaded %d files, %s)\n",
		*name, *iss, v.ID, v.Files, byteSize(v.Bytes), v.UploadedFiles, byteSize(v.UploadedBytes))
	return nil
}

// packDir writes dir as a tar stream: regular files, directories and symlinks, relative paths, .git at the
// top left out; anything else (sockets, devices) is an error, which the server would refuse anyway.
func packDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if rel == ".git" {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return fmt.Errorf("%s: %s files cannot be deployed", p, info.Mode().Type())
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, info.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// templateArgs parses a templates command's flags: -issuer, -name and the positional arguments.
func templateArgs(ctx context.Context, af *adminFlags, cmd string, args []string, stderr io.Writer, names ...string) (iss, name string, pos []string, c *adminclient.Client, err error) {
	fs := af.flagSet(cmd, stderr)
	issFlag := fs.String("issuer", "dev", "the issuer (project)")
	nameFlag := fs.String("name", templates.DefaultName, "the template's name")
	pos, c, err = af.start(ctx, fs, args, names...)
	return *issFlag, *nameFlag, pos, c, err
}

func adminTemplatesList(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	iss, name, _, c, err := templateArgs(ctx, af, "templates ls", args, stderr)
	if err != nil {
		return err
	}
	var list struct {
		Versions []templates.Version `json:"versions"`
	}
	if err := c.Call(ctx, http.MethodGet, templatePath(iss, name), nil, nil, &list); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tDEPLOYED\tFILES\tSIZE\tCURRENT")
	for _, v := range list.Versions {
		cur := ""
		if v.Current {
			cur = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", v.ID, showTime(v.Time), v.Files, byteSize(v.Bytes), cur)
	}
	return tw.Flush()
}

func adminTemplatesUse(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	iss, name, pos, c, err := templateArgs(ctx, af, "templates use", args, stderr, "VERSION")
	if err != nil {
		return err
	}
	var v templates.Version
	if err := c.Call(ctx, http.MethodPost, templatePath(iss, name)+"/current", nil, map[string]string{"version": pos[0]}, &v); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "template %s of %s: version %s (the tree of version %s) is current\n", name, iss, v.ID, pos[0])
	return nil
}

func adminTemplatesDelete(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	iss, name, _, c, err := templateArgs(ctx, af, "templates rm", args, stderr)
	if err != nil {
		return err
	}
	if err := c.Call(ctx, http.MethodDelete, templatePath(iss, name), nil, nil, nil); err != nil {
		return err
	}
	if !af.json {
		fmt.Fprintf(stdout, "deleted template %s of %s (new sandboxes start empty)\n", name, iss)
	}
	return nil
}
