package deptest

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

// What the roles must not link. Heavy: the Terraform provider's plugin framework (and the gRPC it brings),
// the AWS SDK; only cmd/warren wires them (internal/tfprovider, internal/blob/s3).
var (
	terraformPlugin = Dep{Name: "terraform-plugin", Prefixes: []string{"github.com/hashicorp/terraform-plugin-framework",
		"github.com/hashicorp/terraform-plugin-go", "github.com/hashicorp/terraform-plugin-log", "github.com/hashicorp/go-plugin"}}
	grpc   = Dep{Name: "gRPC", Prefixes: []string{"google.golang.org/grpc"}}
	awsSDK = Dep{Name: "AWS SDK", Prefixes: []string{"github.com/aws"}}
	nomad  = Dep{Name: "Nomad API", Prefixes: []string{"github.com/hashicorp/nomad"}}
	consul = Dep{Name: "Consul API", Prefixes: []string{"github.com/hashicorp/consul"}}
	vault  = Dep{Name: "Vault API", Prefixes: []string{"github.com/hashicorp/vault"}}
	sqlDB  = Dep{Name: "SQL driver", Prefixes: []string{"github.com/jackc/pgx", "modernc.org/sqlite"}}
	// A role is given a blob.Store; which adapter is chosen where the role is wired (cmd/warren).
	blobAdapter = Dep{Name: "a blob adapter", Prefixes: []string{"github.com/warren-mesh/warren/internal/blob/fs",
		"github.com/warren-mesh/warren/internal/blob/s3"}}
)

// role is a Dep on another role's packages (roles never import each other's internals; a role's root
// package, its domain types and client, is allowed where listed).
func role(name string, roots ...string) Dep {
	const m = "github.com/warren-mesh/warren/"
	d := Dep{Name: "the " + name + " role", Prefixes: []string{m + name}}
	for _, r := range roots {
		d.Except = append(d.Except, m+r)
	}
	return d
}

// sdkServer is every package of the module but the protocol ones the Go SDK is built on.
var sdkServer = Dep{Name: "a server package", Prefixes: []string{"github.com/warren-mesh/warren"},
	Except: []string{"github.com/warren-mesh/warren/sdk", "github.com/warren-mesh/warren/internal/wire",
		"github.com/warren-mesh/warren/internal/strictjson", "github.com/warren-mesh/warren/internal/wtconn",
		"github.com/warren-mesh/warren/internal/sse"}} // the one event-stream parser, a protocol piece

var heavy = []Dep{terraformPlugin, grpc, awsSDK}

func forbid(deps ...Dep) []Dep { return slices.Concat(heavy, deps) }

// rules is the layering of the module. Add to it when a role gains an adapter; an Allow needs its reason.
var rules = []Rule{
	{Pkgs: "edge/...", Forbid: forbid(nomad, consul, vault, sqlDB, blobAdapter, role("billing", "billing"), role("runner"),
		role("scheduler")),
		Allow: []Allow{{Dep: vault.Name, Via: "internal/mesh",
			Reason: "mesh.VaultSource issues the edge's mesh certificate from Vault's PKI engine, until it moves " +
				"to an adapter package of its own (its test shares the node helpers of package mesh)"}}},
	{Pkgs: "runner/...", Forbid: forbid(nomad, consul, vault, sqlDB, blobAdapter, role("billing", "billing"), role("edge"),
		role("scheduler")),
		Allow: []Allow{{Dep: blobAdapter.Name, Via: "runner",
			Reason: "runner/tasks.go keeps its records on blob/fs itself, the third inversion of issue #23; its " +
				"store comes from the host after the runner split"}}},
	{Pkgs: "sdk/...", Forbid: forbid(nomad, consul, vault, sqlDB, sdkServer)},
	{Pkgs: "billing/...", Forbid: forbid(nomad, consul, vault, role("edge"), role("runner"), role("scheduler"))},
	{Pkgs: "billing", Forbid: []Dep{sqlDB}},
	{Pkgs: "scheduler/...", Forbid: forbid(consul, vault, role("edge"), role("runner"), role("billing", "billing"))},
	{Pkgs: "scheduler", Forbid: []Dep{nomad, sqlDB}},
	{Pkgs: "jobs/...", Forbid: forbid(nomad, consul, vault, sqlDB)},
	// Infrastructure serves the roles and never imports one (a registry adapter keying on a scheduler
	// helper was such an inversion). Left out: the assemblies of whole stacks for warren dev and the tests,
	// and the Terraform provider, a client of billing's admin API and of the SDK.
	{Pkgs: "internal/...", Skip: []string{"internal/devstack", "internal/prodstack", "internal/stacktest",
		"internal/multiregion", "internal/tfprovider"},
		Forbid: []Dep{role("billing"), role("edge"), role("runner"), role("scheduler"), role("jobs"), role("sdk")}},
}

var loaded = sync.OnceValues(func() (*Graph, error) { return Load("../..", "linux", "amd64") })

func load(t *testing.T) *Graph {
	t.Helper()
	g, err := loaded()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLayering fails naming each chain of imports that breaks a rule, e.g.
//
//	runner links google.golang.org/grpc (gRPC, forbidden by rule runner/...): runner → internal/x → google.golang.org/grpc
func TestLayering(t *testing.T) {
	for _, m := range Check(load(t), rules) {
		t.Error(m)
	}
	for _, r := range rules {
		for _, a := range r.Allow {
			if a.Reason == "" {
				t.Errorf("rule %s: the exception for %s via %s gives no reason", r.Pkgs, a.Dep, a.Via)
			}
		}
	}
}

// The checker finds what is there: the binary links gRPC through the Terraform provider, the edge Vault's
// API unless the exception is recorded, and an exception that nothing needs is reported.
func TestCheckReportsChains(t *testing.T) {
	g := load(t)
	msgs := Check(g, []Rule{{Pkgs: "cmd/warren", Forbid: []Dep{grpc}}})
	if len(msgs) != 1 || !strings.Contains(msgs[0], "cmd/warren → ") || !strings.Contains(msgs[0], " → internal/tfprovider → ") ||
		!strings.HasSuffix(msgs[0], " → google.golang.org/grpc") {
		t.Errorf("cmd/warren and gRPC: %q, want one chain through internal/tfprovider", msgs)
	}
	msgs = Check(g, []Rule{{Pkgs: "edge", Forbid: []Dep{vault}}})
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0], "edge links github.com/hashicorp/vault/api (Vault API, forbidden by rule edge): edge → ") ||
		!strings.HasSuffix(msgs[0], " → internal/mesh → github.com/hashicorp/vault/api") {
		t.Errorf("edge and Vault: %q, want the chain through internal/mesh", msgs)
	}
	if msgs := Check(g, []Rule{{Pkgs: "edge", Forbid: []Dep{vault}, Allow: []Allow{{Dep: vault.Name, Via: "internal/mesh"}}}}); len(msgs) != 0 {
		t.Errorf("edge and Vault through the exception: %q, want none", msgs)
	}
	msgs = Check(g, []Rule{{Pkgs: "runner/...", Forbid: []Dep{grpc}, Allow: []Allow{{Dep: grpc.Name, Via: "internal/wire"}}}})
	if len(msgs) != 1 || !strings.Contains(msgs[0], "no longer needed") {
		t.Errorf("unused exception: %q, want it reported", msgs)
	}
	if msgs := Check(g, []Rule{{Pkgs: "nosuch/...", Forbid: heavy}}); len(msgs) != 1 {
		t.Errorf("rule matching nothing: %q, want it reported", msgs)
	}
}
