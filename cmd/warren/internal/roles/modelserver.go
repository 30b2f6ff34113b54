package roles

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/modelserver"
)

func init() {
	register("modelserver", "serve the scripted model API (tests and demos)", runModelServer)
}

// runModelServer serves internal/modelserver until ctx is done. It prints the base URL on stdout, so
// ANTHROPIC_BASE_URL=$(...) style scripts can read it.
func runModelServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warren modelserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren modelserver [flags]\n\nServes the scripted model API (tests and demos).")
	listen := fs.String("listen", "127.0.0.1:8090", "listen address")
	scenario := fs.String("scenario", "auto", "scenario for requests without an "+modelserver.HeaderScenario+" header: "+strings.Join(modelserver.Scenarios(), ", "))
	delay := fs.Duration("delay", modelserver.DefaultDelay, "pause between the events of the \"long\" scenario")
	logLevel := fs.String("log-level", env.Or("WARREN_LOG_LEVEL", "info"), "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !slices.Contains(modelserver.Scenarios(), *scenario) {
		return fmt.Errorf("-scenario %q: want one of %s", *scenario, strings.Join(modelserver.Scenarios(), ", "))
	}
	if *delay <= 0 {
		return fmt.Errorf("-delay must be positive")
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	s := modelserver.New(modelserver.Options{DefaultScenario: *scenario, Logger: log, Delay: *delay})
	url, err := s.Start(*listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, url)
	<-ctx.Done()
	return s.Close()
}
