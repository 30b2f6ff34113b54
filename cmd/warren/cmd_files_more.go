package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	warren "github.com/warren-mesh/warren/sdk"
)

// The files subcommands beyond get, put, ls and rm: stat, mkdir, mv and watch.

func filesStat(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := filesFlagSet("stat", "stat PATH", cf, stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("stat takes one PATH")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	fi, err := c.Sandbox().Stat(ctx, pos[0])
	if err != nil {
		return clientError{err}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(fi)
}

func filesMkdir(ctx context.Context, cf *clientFlags, args []string, stderr io.Writer) error {
	fs := filesFlagSet("mkdir", "mkdir [-p] PATH...", cf, stderr)
	parents := fs.Bool("p", false, "make missing parents; an existing directory is fine")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errors.New("mkdir takes at least one PATH")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	for _, p := range pos {
		if _, err := c.Sandbox().Mkdir(ctx, p, *parents); err != nil {
			return fmt.Errorf("mkdir %s: %w", p, clientError{err})
		}
	}
	return nil
}

func filesMove(ctx context.Context, cf *clientFlags, args []string, stderr io.Writer) error {
	fs := filesFlagSet("mv", "mv [-f] [-p] FROM TO", cf, stderr)
	force := fs.Bool("f", false, "replace what is at TO")
	parents := fs.Bool("p", false, "make TO's missing parent directories")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return errors.New("mv takes FROM and TO")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if _, err := c.Sandbox().Move(ctx, pos[0], pos[1], &warren.MoveOptions{Overwrite: *force, Parents: *parents}); err != nil {
		return fmt.Errorf("mv %s %s: %w", pos[0], pos[1], clientError{err})
	}
	return nil
}

// filesWatch prints one line per change ("create,write path", a trailing / for directories) until
// interrupted, or with -json the events as JSON lines ({"ready":...}, {"change":...}, {"overflow":...}).
func filesWatch(ctx context.Context, cf *clientFlags, args []string, stdout, stderr io.Writer) error {
	fs := filesFlagSet("watch", "watch [-flat] [-debounce D] [-json] [PATH]", cf, stderr)
	flat := fs.Bool("flat", false, "watch the directory alone, not its subdirectories")
	debounce := fs.Duration("debounce", 0, "coalesce changes within this window (10ms to 5s; default the server's 50ms)")
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	path, err := optionalPath(fs, pos, "watch")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for ev, err := range c.Sandbox().Watch(ctx, path, &warren.WatchOptions{NotRecursive: *flat, Debounce: *debounce}) {
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of a watch
			}
			return fmt.Errorf("watch %s: %w", path, clientError{err})
		}
		if *asJSON {
			if err := enc.Encode(ev); err != nil {
				return err
			}
			continue
		}
		switch {
		case ev.Ready != nil:
			fmt.Fprintf(stderr, "watching %s (%d directories)\n", ev.Ready.Path, ev.Ready.Dirs)
		case ev.Change != nil:
			p := ev.Change.Path
			if ev.Change.Dir {
				p += "/"
			}
			fmt.Fprintf(stdout, "%s %s\n", strings.Join(ev.Change.Ops, ","), p)
		case ev.Overflow != nil:
			fmt.Fprintf(stderr, "overflow (%s): %s\n", ev.Overflow.Reason, ev.Overflow.Message)
		}
	}
	return nil
}
