package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"

	"github.com/warren-mesh/warren/internal/tfprovider"
)

// tfProviderName is the name Terraform runs a provider by (terraform-provider-warren_vVERSION in a
// filesystem mirror): warren run under a name starting with it is the provider.
const tfProviderName = "terraform-provider-warren"

// tfProviderVersion is the provider's version announced to Terraform: version when it is a semantic
// version (a release build), else 0.1.0, the version `make terraform-provider` installs the mirror under.
func tfProviderVersion() string {
	v := strings.TrimPrefix(version, "v")
	if v == "" || v == "dev" || strings.IndexFunc(v, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') }) >= 0 || strings.Count(v, ".") != 2 {
		return "0.1.0"
	}
	return v
}

func init() {
	register("terraform-provider", "serve Warren's Terraform provider (run by Terraform from a filesystem mirror; README#terraform-provider)", runTFProvider)
}

// runTFProvider serves the provider until Terraform closes it. A signal does not stop it: Terraform passes
// Ctrl-C to its plugins' process group and cancels their requests itself, so the provider must outlive it
// (a second signal still ends the process, as for every command).
func runTFProvider(ctx context.Context, _ []string, _, _ io.Writer) error {
	return tfprovider.Serve(context.WithoutCancel(ctx), tfProviderVersion())
}

// isTFProviderName reports whether warren was run as the provider's executable (argv[0]).
func isTFProviderName(argv0 string) bool {
	return strings.HasPrefix(filepath.Base(argv0), tfProviderName)
}
