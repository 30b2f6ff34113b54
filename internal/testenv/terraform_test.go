package testenv

import (
	"context"
	"encoding/json"
	"testing"
)

// The terraform `make tools` builds is the pinned release, and it runs with the environment tests give it.
func TestTerraform(t *testing.T) {
	bin := Terraform(t)
	out, err := TerraformCommand(context.Background(), bin, t.TempDir(), "version", "-json").Output()
	if err != nil {
		t.Fatalf("terraform version -json: %v", err)
	}
	var v struct {
		TerraformVersion string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("terraform version -json: %v\n%s", err, out)
	}
	if v.TerraformVersion != TerraformVersion {
		t.Fatalf("terraform %s, want %s", v.TerraformVersion, TerraformVersion)
	}
}
