package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/tfprovider"
)

// tfProviderName is the name Terraform runs a provider by (terraform-provider-warren_vVERSION in a
// filesystem mirror): warren run under a name starting with it is the provider.
const tfProviderName = "terraform-provider-warren"

// tfProviderVersion is the provider's version announced to Terraform: version when it is a semantic
// version (a release build, "v" prefix allowed), else 0.1.0.
func tfProviderVersion() string {
	if v := strings.TrimPrefix(version, "v"); tfprovider.ValidVersion(v) {
		return v
	}
	return "0.1.0"
}

func init() {
	register("terraform-provider", "serve Warren's Terraform provider (as Terraform runs it), or -install DIR: a filesystem mirror of it", runTFProvider)
}

// runTFProvider serves the provider until Terraform is done with it, or with -install lays out a mirror. A
// signal does not stop the provider: Terraform passes Ctrl-C to its plugins' process group and cancels their
// requests itself, so the provider must outlive it (a second signal still ends the process, as for every
// command).
func runTFProvider(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("terraform-provider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren terraform-provider [flags]\n\nServes the Terraform provider (Terraform starts it), or lays out a mirror with -install.")
	install := fs.String("install", "", "lay out a Terraform filesystem mirror holding this binary as the provider in `dir`, with a CLI configuration for TF_CLI_CONFIG_FILE")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *install == "" {
		return tfprovider.Serve(context.WithoutCancel(ctx), tfProviderVersion())
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable: %w", err)
	}
	cfg, err := tfprovider.InstallMirror(exe, *install, tfProviderVersion())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "installed %s %s into the filesystem mirror %s\nuse it with:\n  export TF_CLI_CONFIG_FILE=%s\n",
		tfprovider.Address, tfProviderVersion(), *install, cfg)
	return nil
}

// isTFProviderName reports whether warren was run as the provider's executable (argv[0]).
func isTFProviderName(argv0 string) bool {
	return strings.HasPrefix(filepath.Base(argv0), tfProviderName)
}
