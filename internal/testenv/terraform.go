package testenv

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/tools"
)

// TerraformVersion is the Terraform release `make tools` builds (the last MPL-licensed one).
const TerraformVersion = tools.TerraformVersion

// Terraform returns the terraform binary `make tools` builds into the tools cache, skipping under -short and
// failing when it is missing or reports another version than TerraformVersion: a missing install is never a
// skip.
func Terraform(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs terraform")
	}
	p := tools.ServerPath("terraform")
	if p == "" {
		t.Fatalf("terraform is not installed in %s/bin: run `make tools`", tools.Dir())
	}
	cmd := TerraformCommand(context.Background(), p, t.TempDir(), "version")
	out, err := cmd.CombinedOutput()
	first, _, _ := strings.Cut(string(out), "\n")
	if err != nil || first != "Terraform v"+TerraformVersion {
		t.Fatalf("%s reports %q (%v), want Terraform v%s: run `make tools`", p, first, err, TerraformVersion)
	}
	return p
}

// TerraformCommand is terraform run in dir with a clean environment: no TF_* (or cloud credentials) of the
// caller's, HOME in dir (so no ~/.terraformrc applies), no update check (CHECKPOINT_DISABLE) and
// TF_IN_AUTOMATION. Callers may append to its Env (e.g. TF_CLI_CONFIG_FILE for a filesystem mirror).
func TerraformCommand(ctx context.Context, bin, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"HOME=" + dir,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"TZ=UTC",
		"CHECKPOINT_DISABLE=1",
		"TF_IN_AUTOMATION=1",
	}
	return cmd
}
