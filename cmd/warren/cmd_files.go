package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("files", "read, write and watch files in your sandbox: warren files get|put|ls|rm|stat|mkdir|mv|watch", runFiles)
}

const filesUsage = `usage: warren files [-url U] [-token T] COMMAND ...

commands:
  get PATH [-o FILE]    write the file at PATH to standard output, or to FILE
  put LOCAL REMOTE      upload LOCAL (- for standard input) to REMOTE (ending in / keeps LOCAL's name)
  ls [-json] [PATH]     list a directory (default: the workspace root)
  rm [-r] PATH...       remove files; -r removes directories and what they hold
  stat PATH             describe a file, directory or symlink (JSON)
  mkdir [-p] PATH...    make directories; -p makes parents and accepts existing ones
  mv [-f] [-p] FROM TO  move or rename; -f replaces TO, -p makes TO's parents
  watch [-flat] [-debounce D] [-json] [PATH]
                        print changes under PATH as they happen, until interrupted

Paths in the sandbox are relative to the workspace root.
`

func runFiles(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("files", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags()
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(filesUsage+"\nflags:\n", ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no command given: get, put, ls, rm, stat, mkdir, mv or watch")
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	switch sub {
	case "get":
		return filesGet(ctx, cf, rest, stdout, stderr)
	case "put":
		return filesPut(ctx, cf, rest, stdout, stderr)
	case "ls":
		return filesList(ctx, cf, rest, stdout, stderr)
	case "rm":
		return filesRemove(ctx, cf, rest, stderr)
	case "stat":
		return filesStat(ctx, cf, rest, stdout, stderr)
	case "mkdir":
		return filesMkdir(ctx, cf, rest, stderr)
	case "mv":
		return filesMove(ctx, cf, rest, stderr)
	case "watch":
		return filesWatch(ctx, cf, rest, stdout, stderr)
	case "help":
		fs.Usage()
		return flag.ErrHelp
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q: want get, put, ls, rm, stat, mkdir, mv or watch", sub)
}

// filesFlagSet is the flag set of one files subcommand; it takes the client flags too.
func filesFlagSet(name, usage string, cf *clientFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("files "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help.Wrap(fmt.Sprintf("usage: warren files %s\n\nflags:\n", usage), ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	return fs
}

// parseInterleaved parses flags wherever they appear among the positional arguments (get PATH -o FILE);
// everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func filesGet(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := filesFlagSet("get", "get PATH [-o FILE]", cf, stderr)
	out := fs.String("o", "", "write to `FILE` instead of standard output")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("get takes one PATH")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	rc, err := c.Sandbox().Open(ctx, pos[0])
	if err != nil {
		return clientError{err}
	}
	defer rc.Close()
	src, done := progress(stderr, rc, -1, "get "+pos[0])
	defer done()
	if *out == "" || *out == "-" {
		if _, err := io.Copy(stdout, src); err != nil {
			return fmt.Errorf("get %s: %w", pos[0], clientError{err})
		}
		return nil
	}
	// The file is created only once the sandbox has answered, so a failed get leaves nothing behind.
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		os.Remove(*out)
		return fmt.Errorf("get %s: %w", pos[0], clientError{err})
	}
	return f.Close()
}

func filesPut(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := filesFlagSet("put", "put LOCAL REMOTE   (LOCAL - reads standard input)", cf, stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return errors.New("put takes LOCAL and REMOTE")
	}
	local, remote := pos[0], pos[1]
	var r io.Reader = clientStdin
	size := int64(-1)
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return fmt.Errorf("%s is a directory; put uploads one file", local)
		} else if err == nil {
			size = fi.Size()
		}
		r = f
		if strings.HasSuffix(remote, "/") {
			remote += filepath.Base(local)
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	r, done := progress(stderr, r, size, "put "+remote)
	fw, err := c.Sandbox().WriteFile(ctx, remote, r)
	done()
	if err != nil {
		return clientError{err}
	}
	fmt.Fprintf(stdout, "wrote %d bytes to %s\n", fw.Size, fw.Path)
	return nil
}

func filesList(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := filesFlagSet("ls", "ls [-json] [PATH]", cf, stderr)
	asJSON := fs.Bool("json", false, "print the entries as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	path, err := optionalPath(fs, pos, "ls")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	entries, err := c.Sandbox().List(ctx, path)
	if err != nil {
		return clientError{err}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	if *asJSON {
		if entries == nil {
			entries = []warren.FileInfo{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSIZE\tMODIFIED\tNAME")
	for _, e := range entries {
		size, name := filesSize(e.Size), e.Name
		if e.Type == "dir" {
			size, name = "-", name+"/"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Type, size, showWireTime(e.ModTime), name)
	}
	return tw.Flush()
}

// optionalPath is the one optional PATH of cmd among pos, "." (the workspace root) when absent.
func optionalPath(fs *flag.FlagSet, pos []string, cmd string) (string, error) {
	if len(pos) > 1 {
		fs.Usage()
		return "", fmt.Errorf("%s takes at most one PATH", cmd)
	}
	if len(pos) == 1 {
		return pos[0], nil
	}
	return ".", nil
}

// filesSize is n in the style of ls -h.
func filesSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d", n)
	}
	f, unit := float64(n), ""
	for _, u := range []string{"K", "M", "G", "T", "P", "E"} {
		f, unit = f/1024, u
		if f < 1024 {
			break
		}
	}
	if f < 10 {
		return fmt.Sprintf("%.1f%s", f, unit)
	}
	return fmt.Sprintf("%.0f%s", f, unit)
}

func filesRemove(ctx context.Context, cf *clientFlags, args []string, stderr io.Writer) error {
	fs := filesFlagSet("rm", "rm [-r] PATH...", cf, stderr)
	recursive := fs.Bool("r", false, "remove directories and their contents")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errors.New("rm takes at least one PATH")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb := c.Sandbox()
	for _, p := range pos {
		if err := sb.Remove(ctx, p, *recursive); err != nil {
			return fmt.Errorf("rm %s: %w", p, clientError{err})
		}
	}
	return nil
}
