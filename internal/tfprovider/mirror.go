package tfprovider

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// CLIConfigName is the Terraform CLI configuration InstallMirror writes beside the mirror's tree: point
// TF_CLI_CONFIG_FILE at it.
const CLIConfigName = "warren.tfrc"

// InstallMirror lays out a Terraform filesystem mirror in dir holding the provider: the executable exe,
// copied to registry.terraform.io/warren/warren/VERSION/OS_ARCH/terraform-provider-warren_vVERSION (the
// unpacked layout Terraform reads), and dir/warren.tfrc, a CLI configuration that installs this provider
// from the mirror and no other from anywhere (no registry is asked). It returns the configuration's path.
func InstallMirror(exe, dir, version string) (string, error) {
	if !ValidVersion(version) {
		return "", fmt.Errorf("provider version %q: want MAJOR.MINOR.PATCH", version)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	pkg := filepath.Join(abs, filepath.FromSlash(Address), version, runtime.GOOS+"_"+runtime.GOARCH)
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return "", fmt.Errorf("install the provider: %w", err)
	}
	if err := copyExecutable(exe, filepath.Join(pkg, "terraform-provider-warren_v"+version)); err != nil {
		return "", fmt.Errorf("install the provider: %w", err)
	}
	cfg := filepath.Join(abs, CLIConfigName)
	text := fmt.Sprintf(`# Terraform CLI configuration written by warren terraform-provider -install: use it with
#   export TF_CLI_CONFIG_FILE=%s
provider_installation {
  filesystem_mirror {
    path    = %s
    include = ["%s"]
  }
}
`, cfg, strconv.Quote(abs), Address)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return "", fmt.Errorf("write the CLI configuration: %w", err)
	}
	return cfg, nil
}

// ValidVersion reports whether v is a plain MAJOR.MINOR.PATCH, a version Terraform accepts for a provider.
func ValidVersion(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 32); err != nil || (len(p) > 1 && p[0] == '0') {
			return false
		}
	}
	return true
}

// copyExecutable copies src to dst (replacing it through a rename, so a provider Terraform runs at that
// moment keeps its file) with mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".provider-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
