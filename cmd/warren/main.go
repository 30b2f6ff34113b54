// Command warren is Warren's one binary: every role (dev, edge, scheduler, runner, billing) and the client
// tools (token, exec, files, bench) are subcommands. main only dispatches, wires and handles signals; the
// roles live in their packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary: summary, run: run}
}

// exitError carries a process exit code (warren exec exits with the command's code).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	if isTFProviderName(os.Args[0]) { // a filesystem mirror's terraform-provider-warren_vX.Y.Z
		os.Exit(runMain(append([]string{"terraform-provider"}, os.Args[1:]...), os.Stdout, os.Stderr))
	}
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "warren: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	ctx, stop := notifyShutdown(stderr, os.Exit)
	defer stop()
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintf(stderr, "warren %s: %v\n", args[0], err)
		return 1
	}
}

// notifyShutdown returns a context that the first SIGINT or SIGTERM cancels: the command shuts down
// gracefully. A second signal before stop ends the process at once through exit, with 128 + the signal's
// number (130 for SIGINT, 143 for SIGTERM) and one line on stderr, so a person can escape a shutdown that
// takes too long. stop ends the handling (and cancels the context).
func notifyShutdown(stderr io.Writer, exit func(code int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			fmt.Fprintf(stderr, "warren: second %v signal: exiting without finishing the shutdown\n", sig)
			code := 128 + 2 // SIGINT
			if n, ok := sig.(syscall.Signal); ok {
				code = 128 + int(n)
			}
			exit(code)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		})
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: warren <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'warren <command> -h' for the flags of one command, 'warren --version' for the version.")
}
