package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register("version", "print the version", func(_ context.Context, _ []string, stdout, _ io.Writer) error {
		rev := ""
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					rev = " " + s.Value
				}
			}
		}
		fmt.Fprintf(stdout, "warren %s%s %s\n", version, rev, runtime.Version())
		return nil
	})
}
