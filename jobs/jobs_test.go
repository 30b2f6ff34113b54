package jobs_test

//lint:file-ignore SA1019 Nomad 1.6 and 1.7 read only the deprecated stop_after_client_disconnect, so it is set beside the disconnect block (README: Nomad, Consul and Vault versions)

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/jobs"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/nomad"
)

// TestSpecs runs against one real Nomad dev agent with Consul and Vault integration (real servers).
func TestSpecs(t *testing.T) {
	vs := testenv.StartVault(t)
	cs := testenv.StartConsul(t)
	// Region r1: the service jobs' region (the variable region, r1 below) selects the Nomad region.
	ns := testenv.StartNomad(t, testenv.NomadOptions{Region: "r1", ConsulAddr: cs.Addr(), VaultAddr: vs.Addr(), VaultToken: vs.RootToken()})
	t.Run("ValidateAndPlan", func(t *testing.T) { validateAndPlan(t, ns) })
	t.Run("ServiceJobsUseWorkloadIdentityForVault", func(t *testing.T) { serviceJobsUseWorkloadIdentity(t, ns) })
	t.Run("DriverJobIsTheCLIJob", func(t *testing.T) { driverJobIsTheCLIJob(t, ns) })
	t.Run("SandboxTemplateRequiresIdentity", func(t *testing.T) { sandboxTemplateRequiresIdentity(t, ns) })
}

// Every spec is accepted by the real `nomad job validate` and `nomad job plan` (with -var values as an
// operator would pass them) and places; every flag it gives warren is one the role's real binary accepts.
func validateAndPlan(t *testing.T, ns *testenv.NomadServer) {
	client, err := api.NewClient(&api.Config{Address: ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	warren := testenv.WarrenBinary(t)
	dir := t.TempDir()
	// Nomad 1.6 has no workload identity for Vault: the service jobs take the legacy token flow there
	// (README, "Nomad, Consul and Vault versions"); 1.7 and later run their default, vault.role.
	legacy := nomadBefore(t, client, 1, 7)
	// The roles run with driver=raw_exec here: the dev agent in this container has no usable exec driver
	// (it needs cgroups Nomad can manage); production keeps the default, exec. One instance each: the dev
	// agent is one node and the edge asks for distinct hosts.
	for _, tc := range []struct {
		name, role string
		spec       []byte
		vars       map[string]any
		job        string
		wtCert     string // the edge's -wt-cert, and -wt-url https://wt.example.com/wt with it; "": neither
	}{
		{"sandbox", "runner", jobs.Sandbox, map[string]any{
			"sandbox_id": registry.SandboxID("iss", "alice"), "issuer": "iss", "user": "alice", "epoch": 7, "region": "r1",
			"warren_binary": "/usr/local/bin/warren", "cpu": 100, "memory": 128,
			"runner_args": []string{"-consul", "127.0.0.1:8500", "-s3-bucket", "snapshots"},
		}, "sandbox-" + registry.SandboxID("iss", "alice") + "-e7", ""},
		{"sandbox with webhooks", "runner", jobs.Sandbox, map[string]any{
			"sandbox_id": registry.SandboxID("iss", "alice"), "issuer": "iss", "user": "alice", "epoch": 7, "region": "r1",
			"warren_binary": "/usr/local/bin/warren", "cpu": 100, "memory": 128,
			"runner_args":         []string{"-consul", "127.0.0.1:8500", "-s3-bucket", "snapshots"},
			"webhook_secret_path": "secret/data/warren/webhook",
		}, "sandbox-" + registry.SandboxID("iss", "alice") + "-e7", ""},
		{"edge", "edge", jobs.Edge, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1", "vault_addr": "http://127.0.0.1:8200"}, "warren-edge", ""},
		{"edge with mesh", "edge", jobs.Edge, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1", "vault_addr": "http://127.0.0.1:8200",
			"mesh_pki_role": "warren-mesh"}, "warren-edge", ""},
		// A wt_url without a certificate is no WebTransport: no flag.
		{"edge without WebTransport", "edge", jobs.Edge, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1", "vault_addr": "http://127.0.0.1:8200",
			"wt_url": "https://wt.example.com/wt"}, "warren-edge", ""},
		{"edge with WebTransport from files", "edge", jobs.Edge, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1", "vault_addr": "http://127.0.0.1:8200",
			"wt_cert_file": "/etc/warren/wt.crt", "wt_key_file": "/etc/warren/wt.key", "wt_url": "https://wt.example.com/wt"}, "warren-edge", "/etc/warren/wt.crt"},
		{"edge with WebTransport from Vault", "edge", jobs.Edge, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1", "vault_addr": "http://127.0.0.1:8200",
			"wt_cert_secret": "secret/data/warren/wt", "wt_url": "https://wt.example.com/wt"}, "warren-edge", "${NOMAD_SECRETS_DIR}/wt.crt"},
		// Preview URLs: -preview-domain exactly when preview_domain is set.
		{"edge with previews", "edge", jobs.Edge, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1", "vault_addr": "http://127.0.0.1:8200",
			"preview_domain": "preview.warren.example.com"}, "warren-edge", ""},
		{"scheduler", "scheduler", jobs.Scheduler, map[string]any{"driver": "raw_exec", "region": "r1", "runner_args": []string{"-s3-bucket=snapshots", "-idle-timeout=10m"}}, "warren-scheduler", ""},
		{"billing", "billing", jobs.Billing, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1"}, "warren-billing", ""},
		{"scheduler with webhooks", "scheduler", jobs.Scheduler, map[string]any{"driver": "raw_exec", "region": "r1", "runner_webhook_secret_path": "secret/data/warren/webhook"}, "warren-scheduler", ""},
		{"billing with webhooks", "billing", jobs.Billing, map[string]any{"driver": "raw_exec", "count": 1, "region": "r1",
			"webhook_secret_path": "secret/data/warren/webhook"}, "warren-billing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if legacy && tc.name != "sandbox" {
				tc.vars["vault_legacy_token"] = true
			}
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".nomad.hcl")
			if err := os.WriteFile(file, tc.spec, 0o644); err != nil {
				t.Fatal(err)
			}
			var args []string
			for k, v := range tc.vars {
				val := fmt.Sprint(v)
				if l, ok := v.([]string); ok {
					b, _ := json.Marshal(l)
					val = string(b)
				}
				args = append(args, "-var", k+"="+val)
			}
			out, code := nomadCLI(t, ns, append(append([]string{"job", "validate"}, args...), file)...)
			if code != 0 {
				t.Fatalf("nomad job validate exited %d:\n%s", code, out)
			}
			// plan exits 1 when it would create allocations, 0 when nothing changes, 255 on errors.
			out, code = nomadCLI(t, ns, append(append([]string{"job", "plan"}, args...), file)...)
			if code != 0 && code != 1 {
				t.Fatalf("nomad job plan exited %d:\n%s", code, out)
			}
			if !strings.Contains(out, `Job: "`+tc.job+`"`) || !strings.Contains(out, "All tasks successfully allocated") {
				t.Fatalf("nomad job plan does not place job %s:\n%s", tc.job, out)
			}

			// The flags the spec passes exist in the binary it runs.
			vars, _ := json.Marshal(tc.vars)
			job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(tc.spec), Variables: string(vars)})
			if err != nil {
				t.Fatal(err)
			}
			rawArgs, _ := job.TaskGroups[0].Tasks[0].Config["args"].([]any)
			if len(rawArgs) < 2 || rawArgs[0] != tc.role {
				t.Fatalf("task args %v do not start with %q", rawArgs, tc.role)
			}
			help, _ := exec.Command(warren, tc.role, "-h").CombinedOutput()
			for i := 1; i < len(rawArgs); i += 2 { // every flag of the specs takes a value: -flag value
				flagName, _ := rawArgs[i].(string)
				if !strings.HasPrefix(flagName, "-") {
					t.Fatalf("task args %v: %q is not a flag", rawArgs, flagName)
				}
				if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(flagName) + `(\s|$)`).Match(help) {
					t.Errorf("warren %s has no flag %s", tc.role, flagName)
				}
			}

			// The edge's WebTransport flags are there exactly when a certificate is configured; from Vault, the
			// secret's cert and key are rendered to the files the flags name.
			if tc.role == "edge" {
				flags := map[string]string{}
				for i := 1; i+1 < len(rawArgs); i += 2 {
					flags[rawArgs[i].(string)], _ = rawArgs[i+1].(string)
				}
				want := map[string]string{}
				if tc.wtCert != "" {
					want = map[string]string{"-wt-cert": tc.wtCert, "-wt-key": strings.TrimSuffix(tc.wtCert, ".crt") + ".key", "-wt-url": "https://wt.example.com/wt"}
				}
				for _, f := range []string{"-wt-cert", "-wt-key", "-wt-url"} {
					if flags[f] != want[f] {
						t.Errorf("%s %q, want %q (args %v)", f, flags[f], want[f], rawArgs)
					}
				}
				wantDomain, _ := tc.vars["preview_domain"].(string)
				if flags["-preview-domain"] != wantDomain || slices.Contains(rawArgs, any("-preview-domain")) != (wantDomain != "") {
					t.Errorf("-preview-domain %q, want %q (args %v)", flags["-preview-domain"], wantDomain, rawArgs)
				}
				var wtTemplates []string
				for _, tpl := range job.TaskGroups[0].Tasks[0].Templates {
					if strings.HasPrefix(*tpl.DestPath, "secrets/wt.") {
						wtTemplates = append(wtTemplates, *tpl.DestPath+" "+*tpl.EmbeddedTmpl+" "+*tpl.ChangeMode)
					}
				}
				var wantTemplates []string
				if secret, _ := tc.vars["wt_cert_secret"].(string); secret != "" {
					wantTemplates = []string{
						`secrets/wt.crt {{ with secret "` + secret + `" }}{{ .Data.data.cert }}{{ end }} noop`,
						`secrets/wt.key {{ with secret "` + secret + `" }}{{ .Data.data.key }}{{ end }} noop`,
					}
				}
				if !slices.Equal(wtTemplates, wantTemplates) {
					t.Errorf("WebTransport templates %q, want %q", wtTemplates, wantTemplates)
				}
			}
			switch tc.role {
			case "billing":
				checkWebhookSecret(t, job, rawArgs, tc.vars, "restart")
			case "runner": // a new secret must not kill a live sandbox
				checkWebhookSecret(t, job, rawArgs, tc.vars, "noop")
				checkSandboxNetwork(t, client, tc.vars)
			}
		})
	}
}

// By default each service job's task logs in to Vault with its workload identity: vault.role and a
// vault_default identity for Vault's audience, and no policies; vault_legacy_token switches to policies
// alone (Nomad 1.6). Both forms go through the agent's parse endpoint. (The agent built here is Nomad 1.6.1
// with the nomad/api of early 2024, whose job structs already have vault.role and named identities, so it
// parses the default form; Nomad 1.6.1 itself would not, and its servers drop the role: there the jobs
// run with vault_legacy_token, as validateAndPlan does.)
func serviceJobsUseWorkloadIdentity(t *testing.T, ns *testenv.NomadServer) {
	client, err := api.NewClient(&api.Config{Address: ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec []byte
	}{{"edge", jobs.Edge}, {"scheduler", jobs.Scheduler}, {"billing", jobs.Billing}} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(tc.spec), Variables: `{"region":"r1"}`})
			if err != nil {
				t.Fatal(err)
			}
			task := job.TaskGroups[0].Tasks[0]
			if task.Vault == nil || task.Vault.Role != "warren-"+tc.name || len(task.Vault.Policies) != 0 {
				t.Fatalf("vault %+v, want role warren-%s and no policies", task.Vault, tc.name)
			}
			var vaultID *api.WorkloadIdentity
			for _, id := range task.Identities {
				if id.Name == "vault_default" {
					vaultID = id
				}
			}
			if vaultID == nil || !slices.Equal(vaultID.Audience, []string{"vault.io"}) || vaultID.TTL <= 0 {
				t.Fatalf("identities %+v, want vault_default for audience vault.io with a TTL", task.Identities)
			}
			// Nomad 1.6's servers refuse that form (they drop the role, and a vault block needs policies):
			// loudly, not a task without a token.
			if nomadBefore(t, client, 1, 7) {
				resp, _, err := client.Jobs().Validate(job, nil)
				msg := fmt.Sprint(err)
				if err == nil {
					msg = resp.Error
				}
				if msg == "" {
					t.Fatal("Nomad 1.6 accepted the workload-identity form")
				}
				if !strings.Contains(msg, "Policy list cannot be empty") {
					t.Fatalf("Nomad 1.6 refused the workload-identity form for another reason: %s", msg)
				}
			}

			job, err = client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(tc.spec), Variables: `{"region":"r1","vault_legacy_token":true}`})
			if err != nil {
				t.Fatal(err)
			}
			task = job.TaskGroups[0].Tasks[0]
			if task.Vault == nil || task.Vault.Role != "" || !slices.Equal(task.Vault.Policies, []string{"warren-" + tc.name}) || len(task.Identities) != 0 {
				t.Fatalf("legacy token flow: vault %+v, identities %+v, want policies [warren-%s] alone", task.Vault, task.Identities, tc.name)
			}
		})
	}
}

// nomadBefore reports whether the agent behind client is a Nomad older than major.minor.
func nomadBefore(t *testing.T, client *api.Client, major, minor int) bool {
	t.Helper()
	self, err := client.Agent().Self()
	if err != nil {
		t.Fatal(err)
	}
	var maj, min int
	if _, err := fmt.Sscanf(self.Member.Tags["build"], "%d.%d", &maj, &min); err != nil {
		t.Fatalf("Nomad build %q: %v", self.Member.Tags["build"], err)
	}
	return maj < major || (maj == major && min < minor)
}

// The sandbox job the driver produces (template + JSON variables through /v1/jobs/parse) is the job the
// Nomad CLI makes of the same file and the same -var values, and it plans cleanly.
func driverJobIsTheCLIJob(t *testing.T, ns *testenv.NomadServer) {
	client, err := api.NewClient(&api.Config{Address: ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := nomad.New(nomad.Config{
		Client: client, Registry: mem.New(), Binary: "/opt/warren/bin/warren", Driver: "raw_exec",
		RunnerArgs: []string{"-consul", "127.0.0.1:8500", "-s3-bucket", "snapshots"},
		Env:        map[string]string{"WARREN_LOG_LEVEL": "debug"},
		CPU:        250, MemoryMB: 300, KillTimeout: time.Minute, Datacenters: []string{"dc1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	user := `bob "the builder" \o/`
	spec := scheduler.Spec{ID: registry.SandboxID("https://iss.example", user), Issuer: "https://iss.example", User: user, Epoch: 42, Region: "eu"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := d.Job(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "sandbox.nomad.hcl")
	if err := os.WriteFile(file, jobs.Sandbox, 0o644); err != nil {
		t.Fatal(err)
	}
	varFile := filepath.Join(t.TempDir(), "vars.json")
	vars, _ := json.Marshal(map[string]any{
		"sandbox_id": spec.ID, "issuer": spec.Issuer, "user": spec.User, "epoch": spec.Epoch, "region": spec.Region,
		"warren_binary": "/opt/warren/bin/warren", "driver": "raw_exec", "datacenters": []string{"dc1"},
		"runner_args": []string{"-consul", "127.0.0.1:8500", "-s3-bucket", "snapshots"},
		"env":         map[string]string{"WARREN_LOG_LEVEL": "debug"},
		"cpu":         250, "memory": 300, "kill_timeout": "1m0s",
	})
	if err := os.WriteFile(varFile, vars, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := nomadCLI(t, ns, "job", "run", "-output", "-var-file", varFile, file)
	if code != 0 {
		t.Fatalf("nomad job run -output exited %d:\n%s", code, out)
	}
	var cli struct{ Job *api.Job }
	if err := json.Unmarshal([]byte(out), &cli); err != nil {
		t.Fatalf("decode CLI job: %v\n%s", err, out)
	}
	cli.Job.Canonicalize()
	want := cli.Job

	if *got.ID != "sandbox-"+spec.ID+"-e42" {
		t.Errorf("job id %s", *got.ID)
	}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"ID", *got.ID, *want.ID},
		{"Name", *got.Name, *want.Name},
		{"Type", *got.Type, *want.Type},
		{"Datacenters", got.Datacenters, want.Datacenters},
		{"Meta", got.Meta, want.Meta},
		{"Restart", *got.TaskGroups[0].RestartPolicy, *want.TaskGroups[0].RestartPolicy},
		{"Reschedule", *got.TaskGroups[0].ReschedulePolicy, *want.TaskGroups[0].ReschedulePolicy},
		{"StopAfterClientDisconnect", *got.TaskGroups[0].StopAfterClientDisconnect, *want.TaskGroups[0].StopAfterClientDisconnect},
		// The driver adds the disconnect block Nomad 1.8 and later read (the template cannot have it).
		{"Disconnect.StopOnClientAfter", fmt.Sprint(got.TaskGroups[0].Disconnect.StopOnClientAfter != nil && *got.TaskGroups[0].Disconnect.StopOnClientAfter == *want.TaskGroups[0].StopAfterClientDisconnect), "true"},
		{"Networks", fmt.Sprint(got.TaskGroups[0].Networks[0].DynamicPorts), fmt.Sprint(want.TaskGroups[0].Networks[0].DynamicPorts)},
		{"Driver", got.TaskGroups[0].Tasks[0].Driver, want.TaskGroups[0].Tasks[0].Driver},
		{"Config", got.TaskGroups[0].Tasks[0].Config, want.TaskGroups[0].Tasks[0].Config},
		{"Env", got.TaskGroups[0].Tasks[0].Env, want.TaskGroups[0].Tasks[0].Env},
		{"CPU", *got.TaskGroups[0].Tasks[0].Resources.CPU, *want.TaskGroups[0].Tasks[0].Resources.CPU},
		{"Memory", *got.TaskGroups[0].Tasks[0].Resources.MemoryMB, *want.TaskGroups[0].Tasks[0].Resources.MemoryMB},
		{"KillTimeout", *got.TaskGroups[0].Tasks[0].KillTimeout, *want.TaskGroups[0].Tasks[0].KillTimeout},
		{"KillSignal", got.TaskGroups[0].Tasks[0].KillSignal, want.TaskGroups[0].Tasks[0].KillSignal},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			t.Errorf("%s: driver %v, CLI %v", f.name, f.got, f.want)
		}
	}
	if got.Meta["warren_user"] != user || got.Meta["warren_issuer"] != spec.Issuer || got.Meta["warren_epoch"] != "42" {
		t.Errorf("meta %v does not carry the spec verbatim", got.Meta)
	}
	if *got.TaskGroups[0].Tasks[0].KillTimeout != time.Minute {
		t.Errorf("kill timeout %v, want the configured 1m", *got.TaskGroups[0].Tasks[0].KillTimeout)
	}

	plan, _, err := client.Jobs().Plan(got, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.FailedTGAllocs) > 0 {
		t.Fatalf("the driver's job does not place: %+v", plan.FailedTGAllocs)
	}
	if len(plan.Warnings) > 0 {
		t.Fatalf("plan warnings: %s", plan.Warnings)
	}
}

// A missing required variable is an error of the real parser, not a silently wrong job.
func sandboxTemplateRequiresIdentity(t *testing.T, ns *testenv.NomadServer) {
	client, err := api.NewClient(&api.Config{Address: ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	for _, vars := range []string{
		`{"issuer":"iss","user":"u","epoch":1}`,
		`{"sandbox_id":"../etc","issuer":"iss","user":"u","epoch":1}`,
		`{"sandbox_id":"` + registry.SandboxID("iss", "u") + `","issuer":"iss","user":"u","epoch":0}`,
		`{"sandbox_id":"` + registry.SandboxID("iss", "u") + `","issuer":"iss","user":"u","epoch":1,"driver":"docker"}`,
	} {
		_, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(jobs.Sandbox), Variables: vars})
		var ue api.UnexpectedResponseError
		if !errors.As(err, &ue) || ue.StatusCode() != 400 {
			t.Errorf("parse with %s = %v, want a 400", vars, err)
		}
	}
}

// nomadCLI runs the real nomad CLI against ns and returns its combined output and exit code.
func nomadCLI(t *testing.T, ns *testenv.NomadServer, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Binary(t, "nomad"), args...)
	cmd.Env = []string{"NOMAD_ADDR=" + ns.Addr(), "HOME=" + t.TempDir(), "PATH=/usr/bin:/bin", "NOMAD_CLI_NO_COLOR=1"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("nomad %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), 0
}

// checkSandboxNetwork: the sandbox job as production runs it (driver exec, the schedulers' default) gives each
// sandbox a network of its own, where preview URLs work: its runner runs as root (pasta needs it) and is given
// none of the development-only flags that share the host's network or skip bubblewrap (the runner would then
// refuse previews, or let them reach the host's loopback).
func checkSandboxNetwork(t *testing.T, client *api.Client, vars map[string]any) {
	t.Helper()
	prod := maps.Clone(vars)
	prod["driver"] = "exec"
	b, _ := json.Marshal(prod)
	job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(jobs.Sandbox), Variables: string(b)})
	if err != nil {
		t.Fatal(err)
	}
	task := job.TaskGroups[0].Tasks[0]
	if task.Driver != "exec" || task.User != "root" {
		t.Errorf("sandbox job under %s runs as %q, want exec as root (a network namespace of its own needs it)", task.Driver, task.User)
	}
	rawArgs, _ := task.Config["args"].([]any)
	for i, a := range rawArgs {
		s, _ := a.(string)
		next := ""
		if i+1 < len(rawArgs) {
			next, _ = rawArgs[i+1].(string)
		}
		if s == "-insecure-no-sandbox" || s == "-preview-host-loopback" || s == "-sandbox-network=host" || (s == "-sandbox-network" && next == "host") {
			t.Errorf("sandbox job passes the development-only %s (args %v)", s, rawArgs)
		}
	}
}

// checkWebhookSecret: the billing and sandbox jobs render the operator's webhook secret from Vault and pass
// -webhook-secret-file exactly when webhook_secret_path is set, with Vault access then only; without it,
// neither (a template of a secret that is not there would keep the task from starting).
func checkWebhookSecret(t *testing.T, job *api.Job, rawArgs []any, vars map[string]any, changeMode string) {
	t.Helper()
	var flag string
	for i := 1; i+1 < len(rawArgs); i += 2 {
		if rawArgs[i] == "-webhook-secret-file" {
			flag, _ = rawArgs[i+1].(string)
		}
	}
	var templates []string
	for _, tpl := range job.TaskGroups[0].Tasks[0].Templates {
		if strings.Contains(*tpl.DestPath, "webhook") {
			templates = append(templates, *tpl.DestPath+" "+*tpl.EmbeddedTmpl+" "+*tpl.ChangeMode+" "+*tpl.Perms)
		}
	}
	var wantFlag string
	var wantTemplates []string
	if path, _ := vars["webhook_secret_path"].(string); path != "" {
		wantFlag = "${NOMAD_SECRETS_DIR}/webhook-secret"
		wantTemplates = []string{`secrets/webhook-secret {{ with secret "` + path + `" }}{{ .Data.data.secret }}{{ end }} ` + changeMode + ` 600`}
	}
	if task := job.TaskGroups[0].Tasks[0]; task.Config["args"].([]any)[0] == "runner" && (task.Vault != nil) != (wantFlag != "") {
		t.Errorf("sandbox job: vault %+v with webhook_secret_path %q", task.Vault, vars["webhook_secret_path"])
	}
	if flag != wantFlag || !slices.Equal(templates, wantTemplates) {
		t.Errorf("webhook secret: flag %q, templates %q; want %q, %q (args %v)", flag, templates, wantFlag, wantTemplates, rawArgs)
	}
}
