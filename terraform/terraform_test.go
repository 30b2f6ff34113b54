// Package terraform_test checks terraform/ with the real Terraform `make tools` builds. The registry that
// serves the hashicorp/nomad, consul and vault providers is not reachable here, so the root module cannot be
// initialised; its part that has no provider, modules/jobs (the jobs and Vault policies of a region, which
// modules/region applies as they are), is rendered by real Terraform for two regions, and what it renders is
// applied by hand as the providers would: the policies and secrets to a real Vault, the jobs to two federated
// Nomad 1.6.1 agents (regions r1 and r2) through r1's, where they run the real warren binary.
package terraform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/warren-mesh/warren/internal/testenv"
)

// `terraform fmt -check` over terraform/: the files are formatted as Terraform formats them.
func TestFormat(t *testing.T) {
	tf := testenv.Terraform(t)
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	out, err := testenv.TerraformCommand(context.Background(), tf, dir, "fmt", "-check", "-recursive", "-diff", "-no-color").CombinedOutput()
	if err != nil {
		t.Fatalf("terraform fmt -check -recursive terraform/: %v\n%s", err, out)
	}
}

// rendered is what modules/jobs renders for one region (its outputs).
type rendered struct {
	Jobspecs      map[string]string            `json:"jobspecs"`
	HCL2Vars      map[string]map[string]string `json:"hcl2_vars"`
	VaultPolicies map[string]string            `json:"vault_policies"`
	VaultNames    map[string]string            `json:"vault_names"`
	SecretsPaths  map[string]string            `json:"secrets_paths"`
}

// region is one Nomad region of the test with its Consul and what Terraform rendered for it.
type region struct {
	name string
	cs   *testenv.ConsulServer
	ns   *testenv.NomadServer
	r    rendered
}

var roles = []string{"edge", "scheduler", "billing"}

// The jobs Terraform renders for regions r1 and r2, submitted to r1's agent of a federation of two Nomad
// agents (each region with its own Consul, one Vault holding the policies and secrets Terraform rendered,
// one database), run in their own region: each job's region selects the Nomad region, as through the root
// module's one nomad provider. Every edge lists both regions' public URLs in GET /v1/regions.
func TestJobsRunInTheirRegions(t *testing.T) {
	tf := testenv.Terraform(t)
	warren := testenv.WarrenBinary(t)
	nomadBin := testenv.Binary(t, "nomad")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	vs := testenv.StartVault(t)
	dsn := testenv.PostgreSQL(t)
	regions := map[string]*region{}
	for _, name := range []string{"r1", "r2"} {
		cs := testenv.StartConsul(t)
		regions[name] = &region{name: name, cs: cs, ns: testenv.StartNomad(t, testenv.NomadOptions{
			Region: name, ConsulAddr: cs.Addr(), VaultAddr: vs.Addr(), VaultToken: vs.RootToken(),
		})}
	}
	r1, r2 := regions["r1"], regions["r2"]
	r1.ns.Join(t, r2.ns)

	render(t, ctx, tf, warren, vs.Addr(), regions)

	// Vault as the vault provider would leave it: the roles' policies as rendered; the secrets as the
	// operator writes them to the paths Terraform outputs (KV v2 at Vault dev's mount secret/).
	for _, rg := range regions {
		for _, role := range roles {
			vaultDo(t, vs, http.MethodPut, "/v1/sys/policies/acl/"+rg.r.VaultNames[role], map[string]any{"policy": rg.r.VaultPolicies[role]})
			mount, rel, _ := strings.Cut(rg.r.SecretsPaths[role], "/")
			vaultDo(t, vs, http.MethodPut, "/v1/"+mount+"/data/"+rel, map[string]any{"data": map[string]string{
				"db": dsn, "scheduler_key": "scheduler-key-of-" + rg.name,
			}})
		}
	}

	// Every job goes through r1's agent, as through one provider: Nomad forwards r2's jobs to r2.
	dir := t.TempDir()
	for _, rg := range regions {
		for _, role := range roles {
			file := filepath.Join(dir, rg.name+"-"+role+".nomad.hcl")
			if err := os.WriteFile(file, []byte(rg.r.Jobspecs[role]), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"job", "run", "-detach"}
			for _, k := range sortedKeys(rg.r.HCL2Vars[role]) {
				args = append(args, "-var", k+"="+rg.r.HCL2Vars[role][k])
			}
			if out, err := nomadCLI(ctx, nomadBin, r1.ns.Addr(), append(args, file)...); err != nil {
				t.Fatalf("nomad job run %s in %s: %v\n%s", role, rg.name, err, out)
			}
		}
	}

	for _, rg := range regions {
		client, err := api.NewClient(&api.Config{Address: rg.ns.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		for _, role := range roles {
			job, _, err := client.Jobs().Info("warren-"+role, nil)
			if err != nil {
				t.Fatalf("job warren-%s in %s: %v", role, rg.name, err)
			}
			if *job.Region != rg.name || job.Meta["warren_region"] != rg.name {
				t.Errorf("job warren-%s in Nomad region %s has region %s, meta %v", role, rg.name, *job.Region, job.Meta)
			}
		}
	}

	// Every job's allocation runs on its own region's node; the edges of both regions list both.
	want := map[string]string{"r1": "http://r1.warren.test", "r2": "http://r2.warren.test"}
	for _, rg := range regions {
		client, err := api.NewClient(&api.Config{Address: rg.ns.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		var edgeAddr string
		waitFor(t, ctx, rg, func() error {
			for _, role := range roles {
				allocs, _, err := client.Jobs().Allocations("warren-"+role, false, nil)
				if err != nil {
					return err
				}
				running := slices.IndexFunc(allocs, func(a *api.AllocationListStub) bool {
					return a.ClientStatus == api.AllocClientStatusRunning && a.NodeID == rg.ns.NodeID()
				})
				if running < 0 {
					return fmt.Errorf("warren-%s has no running allocation on %s's node: %s", role, rg.name, allocSummary(allocs))
				}
				if role == "edge" {
					alloc, _, err := client.Allocations().Info(allocs[running].ID, nil)
					if err != nil {
						return err
					}
					for _, p := range alloc.AllocatedResources.Shared.Ports {
						if p.Label == "http" {
							edgeAddr = fmt.Sprintf("%s:%d", p.HostIP, p.Value)
						}
					}
				}
			}
			var regs struct {
				Regions []struct{ Name, URL string }
			}
			if err := getJSON(ctx, "http://"+edgeAddr+"/v1/regions", &regs); err != nil {
				return fmt.Errorf("edge of %s: %w", rg.name, err)
			}
			got := map[string]string{}
			for _, r := range regs.Regions {
				got[r.Name] = r.URL
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("edge of %s lists regions %v, want %v", rg.name, got, want)
			}
			return nil
		})
	}
}

// render writes a root module calling terraform/modules/jobs for each region and returns its outputs, as
// `terraform init`, `apply` (nothing to create: it has no providers) and `output -json` give them.
func render(t *testing.T, ctx context.Context, tf, warren, vaultAddr string, regions map[string]*region) {
	t.Helper()
	module, err := filepath.Abs("modules/jobs")
	if err != nil {
		t.Fatal(err)
	}
	jobsDir, err := filepath.Abs("../jobs")
	if err != nil {
		t.Fatal(err)
	}
	var root strings.Builder
	for _, rg := range regions {
		fmt.Fprintf(&root, `module %q {
  source             = %q
  region             = %q
  datacenters        = ["dc1"]
  sandbox_datacenter = "dc1"
  public_url         = "http://%s.warren.test"
  jobs_dir           = %q
  warren_binary      = %q
  driver             = "raw_exec"
  sandbox_driver     = "raw_exec"
  edge_count         = 1
  billing_count      = 1
  consul_addr        = %q
  nomad_addr         = %q
  vault_addr         = %q
  vault_legacy_token = true # Nomad 1.6
  kv_mount           = "secret"
  nomad_role_path    = "" # no Nomad ACLs here
  mesh_pki_role      = ""
  mesh_pki_mount     = "pki"
  bucket             = { name = "snapshots-%s", s3_region = "us-east-1", endpoint = "", path_style = false }
  other_buckets      = {}
  runner_args        = []
}

output %q {
  value = module.%s
}
`, rg.name, module, rg.name, rg.name, jobsDir, warren, rg.cs.Addr(), rg.ns.Addr(), vaultAddr, rg.name, rg.name, rg.name)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(root.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var outputs []byte
	for _, args := range [][]string{
		{"init", "-input=false", "-no-color"},
		{"apply", "-auto-approve", "-input=false", "-no-color"},
		{"output", "-json", "-no-color"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := testenv.TerraformCommand(ctx, tf, dir, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("terraform %s: %v\n%s%s", args[0], err, stdout.String(), stderr.String())
		}
		outputs = stdout.Bytes()
	}
	var out map[string]struct {
		Value rendered `json:"value"`
	}
	if err := json.Unmarshal(outputs, &out); err != nil {
		t.Fatalf("terraform output -json: %v\n%s", err, outputs)
	}
	for name, rg := range regions {
		rg.r = out[name].Value
		for _, role := range roles {
			if rg.r.Jobspecs[role] == "" || rg.r.VaultPolicies[role] == "" || rg.r.HCL2Vars[role]["region"] != name {
				t.Fatalf("region %s role %s not rendered: %+v", name, role, rg.r)
			}
		}
	}
}

// waitFor polls check until it succeeds, failing t with its last error (and the region's Nomad log) when
// ctx ends.
func waitFor(t *testing.T, ctx context.Context, rg *region, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("region %s: %v\nNomad log:\n%s", rg.name, err, rg.ns.Output())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func allocSummary(allocs []*api.AllocationListStub) string {
	var s []string
	for _, a := range allocs {
		var events []string
		for task, st := range a.TaskStates {
			for _, e := range st.Events {
				events = append(events, task+": "+e.Type+" "+e.DisplayMessage)
			}
		}
		s = append(s, fmt.Sprintf("%s on %s: %s %v", a.ID[:8], a.NodeID[:8], a.ClientStatus, events))
	}
	return fmt.Sprint(s)
}

// vaultDo sends a JSON request to Vault with its root token and fails t unless it succeeds.
func vaultDo(t *testing.T, vs *testenv.VaultServer, method, path string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, vs.Addr()+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Vault-Token", vs.RootToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("vault %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(resp.Body)
		t.Fatalf("vault %s %s: %s %s", method, path, resp.Status, msg.String())
	}
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// nomadCLI runs the real nomad CLI against addr.
func nomadCLI(ctx context.Context, bin, addr string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"NOMAD_ADDR=" + addr, "HOME=" + os.TempDir(), "PATH=/usr/bin:/bin", "NOMAD_CLI_NO_COLOR=1"}
	return cmd.CombinedOutput()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
