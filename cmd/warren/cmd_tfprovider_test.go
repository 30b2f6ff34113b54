package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestTFProviderName(t *testing.T) {
	for argv0, want := range map[string]bool{
		"/m/registry.terraform.io/warren/warren/0.1.0/linux_amd64/terraform-provider-warren_v0.1.0": true,
		"terraform-provider-warren": true, "warren": false, "/usr/bin/terraform-provider-other": false,
		"/terraform-provider-warren/warren": false,
	} {
		if isTFProviderName(argv0) != want {
			t.Errorf("isTFProviderName(%q) = %v", argv0, !want)
		}
	}
	defer func(v string) { version = v }(version)
	for v, want := range map[string]string{"dev": "0.1.0", "v1.4.2": "1.4.2", "1.4.2": "1.4.2", "1.4.2-dirty": "0.1.0"} {
		version = v
		if got := tfProviderVersion(); got != want {
			t.Errorf("version %q: provider version %q, want %q", v, got, want)
		}
	}
}

// TestTFProviderInstall: warren terraform-provider -install lays out the unpacked mirror Terraform reads
// and a CLI configuration naming it.
func TestTFProviderInstall(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := runMain([]string{"terraform-provider", "-install", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	exe := filepath.Join(dir, "registry.terraform.io/warren/warren/0.1.0", runtimeDir(), "terraform-provider-warren_v0.1.0")
	if st, err := os.Stat(exe); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("provider executable: %v %v", st, err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "warren.tfrc"))
	if err != nil || !strings.Contains(string(cfg), `path    = "`+dir+`"`) || !strings.Contains(stdout.String(), "TF_CLI_CONFIG_FILE="+filepath.Join(dir, "warren.tfrc")) {
		t.Fatalf("CLI configuration %s (%v); stdout %s", cfg, err, stdout.String())
	}
	if code := runMain([]string{"terraform-provider", "extra"}, &stdout, &stderr); code == 0 {
		t.Fatal("extra arguments accepted")
	}
}

func runtimeDir() string { return runtime.GOOS + "_" + runtime.GOARCH }
