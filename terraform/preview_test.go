package terraform_test

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/warren-mesh/warren/internal/testenv"
)

// preview_domain reaches the edges: rendered by real Terraform and parsed by a real Nomad agent as the
// nomad_job resource would submit it (jobspec and HCL2 variables), the edge job passes -preview-domain with
// the domain when it is set, in every region, and no such flag when it is not (previews off); warren edge has
// the flag. The other jobs do not change with it.
func TestPreviewDomain(t *testing.T) {
	tf := testenv.Terraform(t)
	ns := testenv.StartNomad(t, testenv.NomadOptions{})
	client, err := api.NewClient(&api.Config{Address: ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(testenv.WarrenBinary(t), "edge", "-h").CombinedOutput()
	if !regexp.MustCompile(`(?m)^\s+-preview-domain(\s|$)`).Match(help) {
		t.Fatalf("warren edge has no flag -preview-domain:\n%s", help)
	}
	regions := `{
    r1 = { public_url = "https://r1.warren.test", bucket = { name = "snapshots-r1" } }
    r2 = { public_url = "https://r2.warren.test", bucket = { name = "snapshots-r2" } }
  }`
	jobs := map[string]map[string]string{} // by domain ("" for none), region and role: the jobs' args as JSON
	for _, domain := range []string{"preview.warren.test", ""} {
		root := renderRoot(t, regions, `"https://vault.example.com:8200"`, "/usr/local/bin/warren", "", `""`, false)
		if domain != "" {
			root = withSettings(t, root, `preview_domain = "`+domain+`"`)
		}
		out := mustRender(t, t.Context(), tf, root)
		jobs[domain] = map[string]string{}
		for _, name := range []string{"r1", "r2"} {
			r, ok := out.Regions.Value[name]
			if !ok {
				t.Fatalf("region %s not rendered", name)
			}
			for _, role := range roles {
				vars, _ := json.Marshal(r.Vars[role])
				job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.Jobspecs[role], Variables: string(vars)})
				if err != nil {
					t.Fatalf("parse the rendered %s job of %s: %v", role, name, err)
				}
				args, _ := job.TaskGroups[0].Tasks[0].Config["args"].([]any)
				b, _ := json.Marshal(args)
				jobs[domain][name+"/"+role] = string(b)
				if role != "edge" {
					continue
				}
				i := slices.Index(args, any("-preview-domain"))
				switch {
				case domain == "" && i >= 0:
					t.Errorf("%s: previews off, yet the edge job passes -preview-domain: %v", name, args)
				case domain != "" && (i < 0 || i+1 >= len(args) || args[i+1] != domain):
					t.Errorf("%s: the edge job's args %v lack -preview-domain %s", name, args, domain)
				}
			}
		}
	}
	for key, args := range jobs[""] {
		if role := key[3:]; role != "edge" && jobs["preview.warren.test"][key] != args {
			t.Errorf("%s: preview_domain changed the job's args: %s, without %s", key, jobs["preview.warren.test"][key], args)
		}
	}
}
