// Package terraform_test checks terraform/ with the real Terraform `make tools` builds. The registry that
// serves the hashicorp/nomad, consul and vault providers is not reachable here, so the root module cannot be
// initialised; its parts that have no provider, modules/settings (the map of regions, checked) and
// modules/jobs (the jobs, Vault policies and Consul ACL rules of a region, which modules/region applies as
// they are), are rendered by real Terraform, and what they render is applied by hand as the providers would:
// the policies to a real Vault and a real Consul that denies by default, the jobs to two federated Nomad
// 1.6.1 agents (regions r1 and r2) through r1's, where they run the real warren binary.
package terraform_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/quic-go/quic-go/http3"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
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

// terraform.tfvars.example is a valid map of regions: rendered as terraform/main.tf renders it, each region's
// edge announces its public_url, and each region's runners read the other's bucket.
func TestExample(t *testing.T) {
	tf := testenv.Terraform(t)
	example, err := filepath.Abs("terraform.tfvars.example")
	if err != nil {
		t.Fatal(err)
	}
	root := `variable "regions" {
  type = any
}

variable "vault_address" {
  type = string
}

variable "mesh_pki_role" {
  type = string
}

variable "nomad_address" {
  type = string
}

variable "nomad_jwks_url" {
  type = string
}

variable "preview_domain" {
  type = string
}
` + withSettings(t, renderRoot(t, "var.regions", "var.vault_address", "/usr/local/bin/warren", "nomad/creds/warren-scheduler", "var.mesh_pki_role", false),
		"preview_domain = var.preview_domain")
	out := mustRender(t, context.Background(), tf, root, "-var-file="+example)
	want := map[string]string{"eu-west": "https://eu-west.warren.example.com", "us-east": "https://us-east.warren.example.com"}
	if len(out.Regions.Value) != len(want) {
		t.Fatalf("rendered regions %v, want %v", out.Settings.Value, want)
	}
	for name, url := range want {
		r := out.Regions.Value[name]
		if got := r.HCL2Vars["edge"]["public_url"]; got != url {
			t.Errorf("%s: edge public_url %q, want %q", name, got, url)
		}
		// Task webhooks are off by default: the billing job renders no secret, its policy reads none.
		if got := r.HCL2Vars["billing"]["webhook_secret_path"]; got != "" || strings.Contains(r.VaultPolicies["billing"], "webhook") ||
			r.HCL2Vars["scheduler"]["runner_webhook_secret_path"] != "" || r.RunnerPolicy != nil {
			t.Errorf("%s: task webhooks on by default: webhook_secret_path %q, runner policy %v, billing policy:\n%s", name, got, r.RunnerPolicy, r.VaultPolicies["billing"])
		}
		// eu-west serves WebTransport with its certificate in Vault, us-east none.
		wantWT := map[string]string{"wt_url": "", "wt_cert_secret": "", "wt_cert_file": "", "wt_key_file": ""}
		var wantCertPath *string
		if name == "eu-west" {
			p := "secret/warren/regions/eu-west/webtransport"
			wantWT["wt_url"], wantWT["wt_cert_secret"], wantCertPath = "https://eu-west.warren.example.com/wt", "secret/data/warren/regions/eu-west/webtransport", &p
		}
		for k, v := range wantWT {
			if got := r.HCL2Vars["edge"][k]; got != v {
				t.Errorf("%s: edge %s %q, want %q", name, k, got, v)
			}
		}
		if (r.WTCertPath == nil) != (wantCertPath == nil) || (r.WTCertPath != nil && *r.WTCertPath != *wantCertPath) {
			t.Errorf("%s: webtransport_cert_path %v, want %v", name, r.WTCertPath, wantCertPath)
		}
		if got := strings.Contains(r.VaultPolicies["edge"], "webtransport"); got != (wantCertPath != nil) {
			t.Errorf("%s: the edge's policy reads a WebTransport certificate: %t, want %t:\n%s", name, got, wantCertPath != nil, r.VaultPolicies["edge"])
		}
		// Previews on: every region's edges get the example's wildcard domain.
		if got := r.HCL2Vars["edge"]["preview_domain"]; got != "preview.warren.example.com" {
			t.Errorf("%s: edge preview_domain %q, want preview.warren.example.com", name, got)
		}
		if got := r.HCL2Vars["edge"]["mesh_pki_role"]; got != "warren-mesh" {
			t.Errorf("%s: edge mesh_pki_role %q", name, got)
		}
		if r.HCL2Vars["edge"]["vault_role"] != "warren-"+name+"-edge" || r.HCL2Vars["edge"]["vault_legacy_token"] != "false" {
			t.Errorf("%s: edge Vault variables %v", name, r.HCL2Vars["edge"])
		}
		for _, role := range []string{"edge", "scheduler", "runner"} {
			if !strings.Contains(r.Consul[role], "node_prefix \"\" {\n  policy = \"read\"\n}\n") {
				t.Errorf("%s: Consul rules of %s: %q", name, role, r.Consul[role])
			}
		}
		for other := range want {
			if other != name && !strings.Contains(r.HCL2Vars["scheduler"]["runner_args"], "-snapshot-region="+other+"=s3://warren-snapshots-"+other) {
				t.Errorf("%s: runner_args %s do not read %s's bucket", name, r.HCL2Vars["scheduler"]["runner_args"], other)
			}
		}
	}
}

// The Consul ACL rules Terraform renders, as policies of a Consul that denies by default: a runner's token
// holds its user's owner key (service, session, lock), the edge's and the scheduler's read it, and the
// edge's can neither take an owner key nor write anything else.
func TestConsulPolicies(t *testing.T) {
	cs := testenv.StartConsulACL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, tokens := renderTwo(t), map[string]string{}
	for role, rules := range out["r1"].Consul {
		name := "warren-r1-" + role
		consulDo(t, cs, http.MethodPut, "/v1/acl/policy", map[string]any{"Name": name, "Rules": rules}, nil)
		var tok struct{ SecretID string }
		consulDo(t, cs, http.MethodPut, "/v1/acl/token", map[string]any{"Policies": []map[string]string{{"Name": name}}}, &tok)
		tokens[role] = tok.SecretID
	}
	for _, role := range []string{"edge", "scheduler", "runner"} {
		if tokens[role] == "" {
			t.Fatalf("no Consul policy rendered for %s: %v", role, out["r1"].Consul)
		}
	}
	reg := func(role string) *consul.Registry {
		r, err := consul.New(consul.Config{Addr: cs.Addr(), Token: tokens[role], Watch: role == "edge"}) // edges watch the owners
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(context.Background()) })
		return r
	}
	entry := registry.Entry{Issuer: "acme", User: "alice", Epoch: 1, Region: "r1", Alloc: "alloc-1", Addr: "127.0.0.1:7001", Key: "runner-key"}
	lease, err := reg("runner").Hold(ctx, entry)
	if err != nil {
		t.Fatalf("the runner's token cannot hold its owner key: %v", err)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	for _, role := range []string{"edge", "scheduler"} {
		got, err := reg(role).Lookup(ctx, entry.Issuer, entry.User)
		if err != nil || got.Alloc != entry.Alloc || got.Key != entry.Key {
			t.Errorf("the %s's token looks up %+v, %v; want the runner's entry", role, got, err)
		}
	}
	// The attacks: an edge's token takes over a user, or writes elsewhere in Warren's keys.
	edge := reg("edge")
	stolen := entry
	stolen.Epoch, stolen.Alloc, stolen.Addr = 2, "evil", "127.0.0.1:6666"
	if err := edge.Register(ctx, stolen); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("the edge's token registering an owner: %v, want Consul's permission denied", err)
	}
	if got, err := reg("scheduler").Lookup(ctx, entry.Issuer, entry.User); err != nil || got.Alloc != entry.Alloc {
		t.Errorf("after the edge's attempt the owner is %+v, %v", got, err)
	}
	if code, answer := call(t, http.MethodPut, "http://"+cs.Addr()+"/v1/kv/warren/warm/r1/evil", "X-Consul-Token", tokens["edge"], "x"); code != http.StatusForbidden {
		t.Errorf("the edge's token writes warren/warm/: %d %s, want 403", code, answer)
	}
}

// renderTwo renders regions r1 and r2 with plain settings (Nomad 1.6's Vault tokens, the mesh on).
func renderTwo(t *testing.T) map[string]rendered {
	t.Helper()
	root := renderRoot(t, `{
    r1 = { public_url = "http://r1.warren.test", bucket = { name = "snapshots-r1" } }
    r2 = { public_url = "http://r2.warren.test", bucket = { name = "snapshots-r2" } }
  }`, `"http://127.0.0.1:8200"`, "/usr/local/bin/warren", "nomad/creds/warren-scheduler", `"warren-mesh"`, true)
	// Task webhooks on (terraform/README.md, "Task webhooks"): the billing jobs read the operator's secret.
	root = withSettings(t, root, `webhook_secret = "warren/webhook"`)
	return mustRender(t, t.Context(), testenv.Terraform(t), root).Regions.Value
}

// The Vault policies Terraform renders, on a real Vault: each role of a region reads its own secrets and no
// other role's or region's; only billing writes issuer keys and the admin key; the edge reads issuer keys and
// issues mesh certificates; the scheduler mints its Nomad token.
func TestVaultPolicies(t *testing.T) {
	vs := testenv.StartVault(t)
	out, tokens := renderTwo(t), map[string]string{}
	for region, r := range out {
		for _, role := range roles {
			vaultDo(t, vs, http.MethodPut, "/v1/sys/policies/acl/"+r.VaultNames[role], map[string]any{"policy": r.VaultPolicies[role]})
			var tok struct {
				Auth struct {
					ClientToken string `json:"client_token"`
				} `json:"auth"`
			}
			vaultDoOut(t, vs, http.MethodPost, "/v1/auth/token/create", map[string]any{"policies": []string{r.VaultNames[role]}, "no_default_policy": true}, &tok)
			tokens[region+"/"+role] = tok.Auth.ClientToken
			mount, rel, _ := strings.Cut(r.SecretsPaths[role], "/")
			vaultDo(t, vs, http.MethodPut, "/v1/"+mount+"/data/"+rel, map[string]any{"data": map[string]string{"db": "postgres://" + region + "-" + role}})
		}
	}
	for _, tc := range []struct {
		token, method, path string
		allowed             bool
	}{
		{"r1/edge", "GET", "secret/data/warren/regions/r1/edge", true},
		{"r1/edge", "GET", "secret/data/warren/regions/r2/edge", false},
		{"r1/edge", "GET", "secret/data/warren/regions/r1/scheduler", false},
		{"r1/edge", "GET", "secret/data/warren/issuers/acme", true},
		{"r1/edge", "GET", "secret/metadata/warren/issuers/acme", true},
		{"r1/edge", "PUT", "secret/data/warren/issuers/acme", false},
		{"r1/edge", "GET", "secret/data/warren/admin", false},
		{"r1/edge", "PUT", "pki/issue/warren-mesh", true},
		{"r1/edge", "PUT", "pki/issue/other-role", false},
		{"r1/scheduler", "GET", "secret/data/warren/regions/r1/scheduler", true},
		{"r1/scheduler", "GET", "secret/data/warren/regions/r1/edge", false},
		{"r1/scheduler", "GET", "nomad/creds/warren-scheduler", true},
		{"r1/scheduler", "GET", "secret/data/warren/issuers/acme", false},
		{"r2/billing", "GET", "secret/data/warren/regions/r2/billing", true},
		{"r2/billing", "GET", "secret/data/warren/regions/r1/billing", false},
		{"r2/billing", "PUT", "secret/data/warren/issuers/acme", true},
		{"r2/billing", "PUT", "secret/data/warren/admin", true},
		{"r2/billing", "GET", "secret/data/warren/model", false},
		{"r2/billing", "DELETE", "secret/metadata/warren/issuers/acme", false},
		{"r2/billing", "GET", "secret/data/warren/webhook", true},
		{"r2/billing", "PUT", "secret/data/warren/webhook", false},
		{"r1/edge", "GET", "secret/data/warren/webhook", false},
		{"r1/scheduler", "GET", "secret/data/warren/webhook", false},
	} {
		// sys/capabilities answers what a token may do on a path, without needing the path to exist.
		var caps struct {
			Capabilities []string `json:"capabilities"`
		}
		vaultDoOut(t, vs, http.MethodPost, "/v1/sys/capabilities", map[string]any{"token": tokens[tc.token], "paths": []string{tc.path}}, &caps)
		need := map[string]string{"GET": "read", "PUT": "update", "DELETE": "delete"}[tc.method]
		if tc.method == "PUT" && strings.Contains(tc.path, "/data/") {
			need = "create"
		}
		if got := slices.Contains(caps.Capabilities, need); got != tc.allowed {
			t.Errorf("%s %s %s: capabilities %v, want %s allowed=%v", tc.token, tc.method, tc.path, caps.Capabilities, need, tc.allowed)
		}
	}
	// The billing jobs render the webhook secret from the path their policy reads; so do the sandbox jobs
	// (through the scheduler), logging in as the region's runner role, whose policy reads that alone.
	for region, r := range out {
		if got := r.HCL2Vars["billing"]["webhook_secret_path"]; got != "secret/data/warren/webhook" {
			t.Errorf("%s: billing webhook_secret_path %q, want secret/data/warren/webhook", region, got)
		}
		if got, role := r.HCL2Vars["scheduler"]["runner_webhook_secret_path"], r.HCL2Vars["scheduler"]["runner_vault_role"]; got != "secret/data/warren/webhook" || role != "warren-"+region+"-runner" {
			t.Errorf("%s: scheduler runner_webhook_secret_path %q, runner_vault_role %q", region, got, role)
		}
		if r.RunnerPolicy == nil {
			t.Fatalf("%s: no runner policy with task webhooks on", region)
		}
		vaultDo(t, vs, http.MethodPut, "/v1/sys/policies/acl/warren-"+region+"-runner", map[string]any{"policy": *r.RunnerPolicy})
		var tok struct {
			Auth struct {
				ClientToken string `json:"client_token"`
			} `json:"auth"`
		}
		vaultDoOut(t, vs, http.MethodPost, "/v1/auth/token/create", map[string]any{"policies": []string{"warren-" + region + "-runner"}, "no_default_policy": true}, &tok)
		for path, want := range map[string][]string{
			"secret/data/warren/webhook":            {"read"},
			"secret/data/warren/issuers/acme":       {"deny"},
			"secret/data/warren/regions/r1/billing": {"deny"},
		} {
			var caps struct {
				Capabilities []string `json:"capabilities"`
			}
			vaultDoOut(t, vs, http.MethodPost, "/v1/sys/capabilities", map[string]any{"token": tok.Auth.ClientToken, "paths": []string{path}}, &caps)
			if !slices.Equal(caps.Capabilities, want) {
				t.Errorf("%s runner on %s: capabilities %v, want %v", region, path, caps.Capabilities, want)
			}
		}
	}
	// And for real: r1's edge reads its own secret and is refused r2's.
	for path, want := range map[string]int{"/v1/secret/data/warren/regions/r1/edge": 200, "/v1/secret/data/warren/regions/r2/edge": 403} {
		if code, answer := call(t, http.MethodGet, vs.Addr()+path, "X-Vault-Token", tokens["r1/edge"], nil); code != want {
			t.Errorf("r1's edge GET %s: %d %s, want %d", path, code, answer, want)
		}
	}
}

// consulDo sends a JSON request to Consul with its management token, fails t unless it succeeds, and decodes
// the answer into out (unless nil).
func consulDo(t *testing.T, cs *testenv.ConsulServer, method, path string, body, out any) {
	t.Helper()
	mustCall(t, method, "http://"+cs.Addr()+path, "X-Consul-Token", cs.ManagementToken(), body, out)
}

// A map of regions Warren cannot run is refused at plan time, with the check's message.
func TestRegionsValidation(t *testing.T) {
	tf := testenv.Terraform(t)
	const eu = `{ eu = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" } } }`
	for _, tc := range []struct{ name, regions, want, settings string }{
		{"no region", `{}`, "regions must name at least one region", ""},
		{"region name", `{ "EU west" = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" } } }`, "lower-case letters, digits and '-'", ""},
		{"public_url scheme", `{ eu = { public_url = "ftp://eu.example.com", bucket = { name = "snaps-eu" } } }`, "public_url must be an http:// or https:// URL", ""},
		{"public_url path", `{ eu = { public_url = "https://eu.example.com/x?y", bucket = { name = "snaps-eu" } } }`, "without path, query or user", ""},
		{"edge_count", `{ eu = { public_url = "https://eu.example.com", edge_count = 0, bucket = { name = "snaps-eu" } } }`, "edge_count and billing_count must be whole numbers", ""},
		{"bucket", `{ eu = { public_url = "https://eu.example.com", bucket = { name = "Snaps/EU" } } }`, "S3 bucket name", ""},
		{"missing bucket", `{ eu = { public_url = "https://eu.example.com" } }`, `attribute "bucket" is required`, ""},
		{"webtransport url", `{ eu = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" }, webtransport = { url = "http://eu.example.com/wt" } } }`, "webtransport.url must be an https:// URL", ""},
		{"webtransport key", `{ eu = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" }, webtransport = { url = "https://eu.example.com/wt", cert_file = "/etc/wt.crt" } } }`, "cert_file and webtransport.key_file go together", ""},
		// Production sandboxes keep a network of their own (preview URLs need it) and bubblewrap.
		{"runner_args host network", `{ eu = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" }, runner_args = ["-idle-timeout=10m", "-sandbox-network", "host"] } }`, "development-only flags", ""},
		{"runner_args host network with =", `{ eu = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" }, runner_args = ["--sandbox-network=host"] } }`, "development-only flags", ""},
		{"runner_args no sandbox", `{ eu = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" }, runner_args = ["-insecure-no-sandbox"] } }`, "development-only flags", ""},
		{"runner_args preview loopback", `{ eu = { public_url = "https://eu.example.com", bucket = { name = "snaps-eu" }, runner_args = ["-preview-host-loopback=true"] } }`, "development-only flags", ""},
		// The preview domain is a DNS name, not a URL or a wildcard.
		{"preview_domain scheme", eu, "preview_domain must be a lower-case DNS name", `preview_domain = "https://preview.example.com"`},
		{"preview_domain wildcard", eu, "preview_domain must be a lower-case DNS name", `preview_domain = "*.preview.example.com"`},
		{"preview_domain port", eu, "preview_domain must be a lower-case DNS name", `preview_domain = "preview.example.com:443"`},
		{"preview_domain one label", eu, "preview_domain must be a lower-case DNS name", `preview_domain = "localhost"`},
		{"preview_domain upper case", eu, "preview_domain must be a lower-case DNS name", `preview_domain = "Preview.Example.com"`},
		{"preview_domain too long", eu, "preview_domain must be a lower-case DNS name", `preview_domain = "` + strings.Repeat("a.", 98) + `com"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := renderRoot(t, tc.regions, `"https://vault.example.com:8200"`, "/usr/local/bin/warren", "", `""`, false)
			if tc.settings != "" {
				root = withSettings(t, root, tc.settings)
			}
			_, err := terraform(context.Background(), tf, root, t.TempDir())
			if err == nil {
				t.Fatalf("regions %s accepted", tc.regions)
			}
			// Terraform wraps long messages: compare with single spaces.
			if msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "│", " ")), " "); !strings.Contains(msg, tc.want) {
				t.Fatalf("regions %s: error lacks %q:\n%v", tc.regions, tc.want, err)
			}
		})
	}
}

// rendered is what modules/jobs renders for one region (its outputs).
type rendered struct {
	RunnerPolicy  *string                      `json:"runner_vault_policy"`
	Jobspecs      map[string]string            `json:"jobspecs"`
	HCL2Vars      map[string]map[string]string `json:"hcl2_vars"`
	Vars          map[string]map[string]any    `json:"vars"`
	VaultPolicies map[string]string            `json:"vault_policies"`
	VaultNames    map[string]string            `json:"vault_names"`
	SecretsPaths  map[string]string            `json:"secrets_paths"`
	Consul        map[string]string            `json:"consul_policies"`
	WTCertPath    *string                      `json:"webtransport_cert_path"`
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
// module's one nomad provider. Every edge lists both regions' public URLs and WebTransport URLs in GET
// /v1/regions and answers HTTP/3 on UDP at its http port: r1's certificate is a file on the node, r2's is in
// Vault, rendered by the edge job's templates.
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

	// One certificate (for 127.0.0.1) for both regions' edges: r1 reads the files, r2 Vault's copy.
	wtCert, err := (&edge.SelfSigned{Hosts: []string{"127.0.0.1"}}).GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := testenv.WriteKeyPair(t, t.TempDir(), "wt", wtCert)
	render(t, ctx, tf, vs.Addr(), regions, map[string]string{
		"r1": fmt.Sprintf("{ url = \"https://r1.warren.test/wt\", cert_file = %q, key_file = %q }", certFile, keyFile),
		"r2": `{ url = "https://r2.warren.test:8443/wt" }`,
	})
	if r1.r.WTCertPath != nil || r2.r.WTCertPath == nil {
		t.Fatalf("webtransport_cert_path: r1 %v, r2 %v; want none and one", r1.r.WTCertPath, r2.r.WTCertPath)
	}

	// Each region's runners write to its bucket and read the other's, with flags warren runner has.
	runnerHelp, _ := exec.Command(warren, "runner", "-h").CombinedOutput()
	for name, other := range map[string]string{"r1": "r2", "r2": "r1"} {
		var args []string
		if err := json.Unmarshal([]byte(regions[name].r.HCL2Vars["scheduler"]["runner_args"]), &args); err != nil {
			t.Fatalf("runner_args of %s: %v", name, err)
		}
		for _, want := range []string{"-s3-bucket=snapshots-" + name, "-snapshot-region=" + other + "=s3://snapshots-" + other + "?region=us-east-1"} {
			if !slices.Contains(args, want) {
				t.Errorf("runner_args of %s %q lack %q", name, args, want)
			}
		}
		for _, a := range args {
			flagName, _, _ := strings.Cut(a, "=")
			if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(flagName) + `(\s|$)`).Match(runnerHelp) {
				t.Errorf("runner_args of %s: warren runner has no flag %s", name, flagName)
			}
		}
	}

	// What templatefile renders is the job Nomad makes of the file itself, with the same variables.
	parser, err := api.NewClient(&api.Config{Address: r1.ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range roles {
		vars, _ := json.Marshal(r2.r.Vars[role])
		file, err := os.ReadFile(filepath.Join("..", "jobs", role+".nomad.hcl"))
		if err != nil {
			t.Fatal(err)
		}
		fromFile, err := parser.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(file), Variables: string(vars)})
		if err != nil {
			t.Fatalf("parse jobs/%s.nomad.hcl: %v", role, err)
		}
		fromRender, err := parser.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: r2.r.Jobspecs[role], Variables: string(vars)})
		if err != nil {
			t.Fatalf("parse the rendered %s job: %v", role, err)
		}
		if !reflect.DeepEqual(fromFile, fromRender) {
			a, _ := json.Marshal(fromFile)
			b, _ := json.Marshal(fromRender)
			t.Fatalf("the rendered %s job differs from the file's:\n%s\n%s", role, a, b)
		}
	}

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
	pemOf := func(file string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	mount, rel, _ := strings.Cut(*r2.r.WTCertPath, "/")
	vaultDo(t, vs, http.MethodPut, "/v1/"+mount+"/data/"+rel, map[string]any{"data": map[string]string{"cert": pemOf(certFile), "key": pemOf(keyFile)}})
	wtRoots := x509.NewCertPool()
	wtRoots.AddCert(wtCert.Leaf)
	h3 := &http.Client{Transport: &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: wtRoots, ServerName: "127.0.0.1"}}}
	defer h3.CloseIdleConnections()

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

	// Every job's allocation runs on its own region's node; the edges of both regions list both, and answer
	// over HTTP/3.
	want := map[string]string{"r1": "http://r1.warren.test https://r1.warren.test/wt", "r2": "http://r2.warren.test https://r2.warren.test:8443/wt"}
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
				Regions []struct{ Name, URL, WebTransport string }
			}
			if err := getJSON(ctx, "http://"+edgeAddr+"/v1/regions", &regs); err != nil {
				return fmt.Errorf("edge of %s: %w", rg.name, err)
			}
			got := map[string]string{}
			for _, r := range regs.Regions {
				got[r.Name] = r.URL + " " + r.WebTransport
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("edge of %s lists regions %v, want %v", rg.name, got, want)
			}
			// A GET of /wt over HTTP/3 reaches the edge's WebTransport handler, which wants a CONNECT.
			resp, err := h3.Get("https://" + edgeAddr + "/wt")
			if err != nil {
				return fmt.Errorf("edge of %s over HTTP/3: %w", rg.name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := wire.ReadHTTPError(resp.StatusCode, body); got.Code != wire.InvalidArgument {
				return fmt.Errorf("edge of %s over HTTP/3: GET /wt %d %s, want %s", rg.name, resp.StatusCode, body, wire.InvalidArgument)
			}
			return nil
		})
	}
}

// renderRoot is a root module doing what terraform/main.tf does without its providers: modules/settings
// checks and derives the regions' settings, modules/jobs renders each region. Its outputs are "regions"
// (what modules/jobs renders, by region) and "settings". regions, vaultAddress and meshPKIRole are HCL
// expressions; the jobs run warren (a path); Warren's secrets are in Vault's mount secret/.
func renderRoot(t *testing.T, regions, vaultAddress, warren, nomadRolePath, meshPKIRole string, legacyToken bool) string {
	t.Helper()
	modules, err := filepath.Abs("modules")
	if err != nil {
		t.Fatal(err)
	}
	jobsDir, err := filepath.Abs("../jobs")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`module "settings" {
  source             = %q
  jobs_dir           = %q
  regions            = %s
  vault_address      = %s
  warren_binary      = %q
  vault_legacy_token = %t
  kv_mount           = "secret"
  nomad_role_path    = %q
  mesh_pki_role      = %s
  mesh_pki_mount     = "pki"
}

module "jobs" {
  source   = %q
  for_each = module.settings.regions
  settings = each.value
}

output "regions" {
  value = module.jobs
}

output "settings" {
  value = module.settings.regions
}
`, filepath.Join(modules, "settings"), jobsDir, regions, vaultAddress, warren, legacyToken, nomadRolePath, meshPKIRole,
		filepath.Join(modules, "jobs"))
}

// withSettings adds lines (HCL attributes) to the arguments of renderRoot's module "settings".
func withSettings(t *testing.T, root string, lines ...string) string {
	t.Helper()
	const after = "  kv_mount           = \"secret\"\n"
	if !strings.Contains(root, after) {
		t.Fatal("withSettings: no kv_mount line to add settings after")
	}
	return strings.Replace(root, after, after+"  "+strings.Join(lines, "\n  ")+"\n", 1)
}

// terraform runs `terraform init` and `apply` (nothing to create: no providers) on root in a directory of
// its own, with args added to apply, and returns `terraform output -json`, or the failing command's output.
func terraform(ctx context.Context, tf, root string, dir string, args ...string) ([]byte, error) {
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(root), 0o644); err != nil {
		return nil, err
	}
	var outputs []byte
	for _, cmdArgs := range [][]string{
		{"init", "-input=false", "-no-color"},
		append([]string{"apply", "-auto-approve", "-input=false", "-no-color"}, args...),
		{"output", "-json", "-no-color"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := testenv.TerraformCommand(ctx, tf, dir, cmdArgs...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("terraform %s: %w\n%s%s", cmdArgs[0], err, stdout.String(), stderr.String())
		}
		outputs = stdout.Bytes()
	}
	return outputs, nil
}

// mustRender runs terraform on root (renderRoot's) and returns its outputs, failing t on any error.
func mustRender(t *testing.T, ctx context.Context, tf, root string, args ...string) renderOutputs {
	t.Helper()
	b, err := terraform(ctx, tf, root, t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	var out renderOutputs
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("terraform output -json: %v\n%s", err, b)
	}
	return out
}

// renderOutputs is terraform output -json of renderRoot.
type renderOutputs struct {
	Regions struct {
		Value map[string]rendered `json:"value"`
	} `json:"regions"`
	Settings struct {
		Value map[string]map[string]any `json:"value"`
	} `json:"settings"`
}

// render renders the regions' jobs for the test's servers: what terraform/main.tf would give its providers
// for a map of regions r1 and r2, each with its own Consul and Nomad.
// webtransport is each region's webtransport setting (HCL), by region.
func render(t *testing.T, ctx context.Context, tf, vaultAddr string, regions map[string]*region, webtransport map[string]string) {
	t.Helper()
	var regionsHCL strings.Builder
	for _, rg := range regions {
		fmt.Fprintf(&regionsHCL, `    %s = {
      public_url     = "http://%s.warren.test"
      consul_addr    = %q
      nomad_addr     = %q
      driver         = "raw_exec"
      sandbox_driver = "raw_exec"
      edge_count     = 1
      billing_count  = 1
      bucket         = { name = "snapshots-%s" }
      webtransport   = %s
    }
`, rg.name, rg.name, rg.cs.Addr(), rg.ns.Addr(), rg.name, cmp.Or(webtransport[rg.name], "null"))
	}
	// Nomad 1.6: Vault tokens from the servers; no Nomad ACLs here, so no Nomad token; no mesh.
	root := renderRoot(t, "{\n"+regionsHCL.String()+"  }", strconv.Quote(vaultAddr), testenv.WarrenBinary(t), "", `""`, true)
	out := mustRender(t, ctx, tf, root)
	for name, rg := range regions {
		rg.r = out.Regions.Value[name]
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
	vaultDoOut(t, vs, method, path, body, nil)
}

// vaultDoOut is vaultDo decoding the answer into out (unless nil).
func vaultDoOut(t *testing.T, vs *testenv.VaultServer, method, path string, body, out any) {
	t.Helper()
	mustCall(t, method, vs.Addr()+path, "X-Vault-Token", vs.RootToken(), body, out)
}

// call sends method url with the header and body (JSON, or a string as it is) and returns the status code and
// the answer; it fails t only when the request cannot be made.
func call(t *testing.T, method, url, header, token string, body any) (int, []byte) {
	t.Helper()
	var b []byte
	if str, ok := body.(string); ok {
		b = []byte(str)
	} else if body != nil {
		b, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(header, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var answer bytes.Buffer
	_, _ = answer.ReadFrom(resp.Body)
	return resp.StatusCode, answer.Bytes()
}

// mustCall is call failing t unless the answer is a success, decoded into out (unless nil).
func mustCall(t *testing.T, method, url, header, token string, body, out any) {
	t.Helper()
	code, answer := call(t, method, url, header, token, body)
	if code/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, url, code, answer)
	}
	if out != nil {
		if err := json.Unmarshal(answer, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, url, err, answer)
		}
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
