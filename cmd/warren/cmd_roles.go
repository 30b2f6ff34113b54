package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// The production roles need the production adapters (Vault, Consul, Nomad, CockroachDB, S3), which are not
// built yet; `warren dev` runs all of them in one process with the embedded adapters.
func init() {
	for _, r := range []struct{ name, summary string }{
		{"edge", "run the edge role (production adapters: not yet available)"},
		{"scheduler", "run the scheduler role (production adapters: not yet available)"},
		{"billing", "run the billing role (production adapters: not yet available)"},
	} {
		name := r.name
		register(name, r.summary, func(_ context.Context, args []string, _, stderr io.Writer) error {
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			fs.SetOutput(stderr)
			if err := fs.Parse(args); err != nil {
				return err
			}
			return errNotProduction(name)
		})
	}
}

func errNotProduction(role string) error {
	return fmt.Errorf("the %s role is not yet configured for production adapters (Vault, Consul, Nomad, CockroachDB, S3); run `warren dev` for the whole platform on one machine", role)
}
