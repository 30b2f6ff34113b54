// Package ops_test keeps docs/ops (the Grafana dashboard and the Prometheus alert rules) true to the code:
// every metric and label their queries use is one Warren's code defines, and every alert has its runbook
// section in README.md.
//
// The metrics are read from the source (every prometheus.New* call of the module's non-test Go files), not
// from a running registry: a registry's Gather leaves out a vector until one of its label combinations has
// been used, so a scrape cannot tell a metric nobody has counted yet from one that does not exist.
//
// The queries are checked lightly, not parsed as PromQL (brackets balance, functions are known ones, ranges
// are durations): the one PromQL parser served here, github.com/prometheus/prometheus, would raise go.mod's
// go version and upgrade modules the roles share for the sake of a test.
package ops_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// metric is what the code says of one metric: its kind and its label names (nil when they are not literal).
type metric struct {
	kind   string // counter, gauge, histogram, summary, or desc (a custom collector's)
	labels []string
	where  string
}

// codeMetrics reads the metrics Warren defines from the module's source.
func codeMetrics(t *testing.T) map[string]metric {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	out := map[string]metric{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" || !strings.HasPrefix(sel.Sel.Name, "New") {
				return true
			}
			name, kind, labels := describe(sel.Sel.Name, call.Args)
			if name != "" {
				rel, _ := filepath.Rel(root, fset.Position(call.Pos()).Filename)
				out[name] = metric{kind: kind, labels: labels, where: rel}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out["up"] = metric{kind: "gauge", labels: []string{}, where: "Prometheus (one per scraped target)"}
	return out
}

// describe reads a prometheus.New<fn>(args) call: NewCounter(Opts), NewCounterVec(Opts, labels),
// NewGaugeFunc(Opts, f)... and NewDesc(name, help, labels, constLabels).
func describe(fn string, args []ast.Expr) (name, kind string, labels []string) {
	if fn == "NewDesc" {
		if len(args) < 3 {
			return "", "", nil
		}
		return stringLit(args[0]), "desc", stringList(args[2])
	}
	for _, k := range []string{"Counter", "Gauge", "Histogram", "Summary"} {
		if !strings.HasPrefix(fn, "New"+k) || len(args) == 0 {
			continue
		}
		opts, ok := args[0].(*ast.CompositeLit)
		if !ok {
			return "", "", nil
		}
		for _, el := range opts.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Name" {
					name = stringLit(kv.Value)
				}
			}
		}
		labels = []string{}
		if strings.HasSuffix(fn, "Vec") {
			labels = nil
			if len(args) > 1 {
				labels = stringList(args[1])
			}
		}
		return name, strings.ToLower(k), labels
	}
	return "", "", nil
}

func stringLit(e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

// stringList is the strings of a []string{...} literal; nil when e is not one.
func stringList(e ast.Expr) []string {
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return []string{}
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	out := []string{}
	for _, el := range lit.Elts {
		s := stringLit(el)
		if s == "" {
			return nil
		}
		out = append(out, s)
	}
	return out
}

var (
	metricRef = regexp.MustCompile(`\b(?:warren_[a-z0-9_]+|up)\b`)
	grouping  = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	selector  = regexp.MustCompile(`\b(?:warren_[a-z0-9_]+|up)\s*\{([^}]*)\}`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	labelsRef = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	call      = regexp.MustCompile(`\b([a-zA-Z_][a-zA-Z0-9_]*)\s*\(`)
	rangeSel  = regexp.MustCompile(`\[([^\]]*)\]`)
	duration  = regexp.MustCompile(`^(\d+[smhdw])+$|^\$__(rate_interval|range|interval)$`)
	// The PromQL functions, aggregations and grouping keywords the files may use (a misspelt one fails).
	promqlCalls = []string{"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "delta", "deriv",
		"histogram_quantile", "max_over_time", "min_over_time", "avg_over_time", "absent", "clamp_min", "by", "without"}
	// added to every scraped series: instance and job by Prometheus, warren_region and consul_dc by
	// prometheus.yml's relabelling
	targetLbls = []string{"instance", "job", "warren_region", "consul_dc"}
)

// checkExpr checks one PromQL expression against the code's metrics and returns the labels it groups by.
func checkExpr(t *testing.T, where, expr string, code map[string]metric) (groupedBy []string) {
	t.Helper()
	depth := map[rune]int{}
	for _, r := range expr {
		switch r {
		case '(', '[', '{':
			depth[r]++
		case ')':
			depth['(']--
		case ']':
			depth['[']--
		case '}':
			depth['{']--
		}
		for _, d := range depth {
			if d < 0 {
				t.Errorf("%s: %q closes a bracket it did not open", where, expr)
				return nil
			}
		}
	}
	for open, d := range depth {
		if d != 0 {
			t.Errorf("%s: %q leaves %c unclosed", where, expr, open)
		}
	}
	for _, c := range call.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(promqlCalls, c[1]) {
			t.Errorf("%s: %q calls %s, not a PromQL function this check knows", where, expr, c[1])
		}
	}
	for _, r := range rangeSel.FindAllStringSubmatch(expr, -1) {
		if !duration.MatchString(r[1]) {
			t.Errorf("%s: %q has range [%s], not a duration", where, expr, r[1])
		}
	}
	var names []string
	for _, n := range metricRef.FindAllString(expr, -1) {
		if !slices.Contains(targetLbls, n) { // warren_region is a label
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		t.Errorf("%s: %q uses no Warren metric", where, expr)
	}
	allowed := slices.Clone(targetLbls)
	anyLabel := false
	for _, n := range names {
		m, ok := code[n]
		if !ok {
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, cut := strings.CutSuffix(n, suffix); cut {
					base = b
					bm, found := code[b]
					if found && (bm.kind == "histogram" || (suffix != "_bucket" && bm.kind == "summary")) {
						m, ok = bm, true
						if suffix == "_bucket" {
							allowed = append(allowed, "le")
						}
					}
				}
			}
			if !ok {
				t.Errorf("%s: metric %s (in %q) is not defined by the code (nor is %s a histogram)", where, n, expr, base)
				continue
			}
		}
		if m.labels == nil {
			anyLabel = true
		}
		allowed = append(allowed, m.labels...)
	}
	var used []string
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				used = append(used, l)
				groupedBy = append(groupedBy, l)
			}
		}
	}
	for _, s := range selector.FindAllStringSubmatch(expr, -1) {
		for _, m := range matcher.FindAllStringSubmatch(s[1], -1) {
			used = append(used, m[1])
		}
	}
	if !anyLabel {
		for _, l := range used {
			if !slices.Contains(allowed, l) {
				t.Errorf("%s: label %q (in %q) is on none of its metrics (labels %v)", where, l, expr, allowed)
			}
		}
	}
	return groupedBy
}

// decode reads file (JSON, or YAML when it ends in .yml, refusing fields v does not have) into v.
func decode(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(file, ".yml") {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		err = dec.Decode(v)
	} else {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// The code defines the metrics the files below are checked against (a guard against a scan that finds
// nothing and so would pass nothing).
func TestCodeMetricsFound(t *testing.T) {
	code := codeMetrics(t)
	for _, n := range []string{"warren_edge_connections_total", "warren_ledger_seconds", "warren_mesh_connections", "warren_sandbox_starts_total", "warren_runner_exec_total"} {
		if _, ok := code[n]; !ok {
			t.Errorf("metric %s not found in the source; found %d", n, len(code))
		}
	}
	if m := code["warren_ledger_seconds"]; m.kind != "histogram" || !slices.Equal(m.labels, []string{"op", "outcome"}) {
		t.Errorf("warren_ledger_seconds read as %+v", m)
	}
	if m := code["warren_mesh_connections"]; m.kind != "desc" || !slices.Equal(m.labels, []string{"peer", "direction"}) {
		t.Errorf("warren_mesh_connections read as %+v", m)
	}
}

// Every query of the Grafana dashboard uses metrics and labels the code defines.
func TestDashboard(t *testing.T) {
	code := codeMetrics(t)
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	decode(t, "grafana-dashboard.json", &dash)
	if dash.Title == "" || dash.UID == "" {
		t.Error("the dashboard has no title or uid")
	}
	ids := map[int]bool{}
	exprs := 0
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkExpr(t, "panel "+strconv.Quote(p.Title), tg.Expr, code)
			exprs++
			for _, s := range metricRef.FindAllStringIndex(tg.Expr, -1) {
				if slices.Contains(targetLbls, tg.Expr[s[0]:s[1]]) {
					continue
				}
				if !regexp.MustCompile(dashFilter).MatchString(tg.Expr[s[1]:]) {
					t.Errorf("panel %q: %s is not filtered by the region, job and instance variables (%s)", p.Title, tg.Expr[s[0]:s[1]], dashFilter)
				}
			}
		}
	}
	if exprs == 0 {
		t.Fatal("the dashboard has no queries")
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"datasource", "region", "job", "instance"} {
		if !slices.Contains(vars, want) {
			t.Errorf("the dashboard has no %s variable (it has %v)", want, vars)
		}
	}
}

// dashFilter opens (or, after a selector's own matchers, continues) every metric selector of the dashboard.
var dashFilter = regexp.MustCompile(`^\{(?:[^}]*, )?warren_region=~"\$region", job=~"\$job", instance=~"\$instance"\}`).String()

// docs/ops/prometheus.yml discovers exactly the Consul services jobs/*.nomad.hcl register for the roles'
// metrics listeners (each job passing -metrics-listen the port it registers), and labels them as the
// dashboard and alerts expect.
func TestPrometheusConfig(t *testing.T) {
	var cfg struct {
		Global        map[string]string `yaml:"global"`
		RuleFiles     []string          `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName     string `yaml:"job_name"`
			MetricsPath string `yaml:"metrics_path"`
			Consul      []struct {
				Server   string   `yaml:"server"`
				Services []string `yaml:"services"`
				Tags     []string `yaml:"tags"`
			} `yaml:"consul_sd_configs"`
			Relabel []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				TargetLabel  string   `yaml:"target_label"`
				Replacement  string   `yaml:"replacement"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	decode(t, "prometheus.yml", &cfg)
	if !slices.Equal(cfg.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("rule_files %v, want [alerts.yml]", cfg.RuleFiles)
	}
	var services []string
	targets := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, c := range sc.Consul {
			services = append(services, c.Services...)
		}
		for _, r := range sc.Relabel {
			targets[r.TargetLabel] = true
			if r.TargetLabel == "job" {
				for _, role := range []string{"edge", "scheduler", "billing", "runner"} {
					m := regexp.MustCompile("^(?:" + r.Regex + ")$").FindStringSubmatch("warren-" + role + "-metrics")
					if m == nil || r.Replacement != "$1" || m[1] != role {
						t.Errorf("the job relabelling (%q → %q) does not make job=%q of warren-%s-metrics", r.Regex, r.Replacement, role, role)
					}
				}
			}
		}
	}
	for _, l := range []string{"job", "warren_region"} {
		if !targets[l] {
			t.Errorf("prometheus.yml sets no %s label", l)
		}
	}
	registered := regexp.MustCompile(`(?m)^\s*name\s*=\s*"(warren-[a-z]+-metrics)"\s*\n\s*port\s*=\s*"metrics"`)
	var fromJobs []string
	for _, f := range []string{"edge", "scheduler", "billing", "sandbox"} {
		b, err := os.ReadFile("../../jobs/" + f + ".nomad.hcl")
		if err != nil {
			t.Fatal(err)
		}
		m := registered.FindAllSubmatch(b, -1)
		if len(m) != 1 {
			t.Errorf("jobs/%s.nomad.hcl registers %d metrics services, want 1", f, len(m))
			continue
		}
		fromJobs = append(fromJobs, string(m[0][1]))
		if !regexp.MustCompile(`"-metrics-listen",\s*"\$?\$\{NOMAD_ADDR_metrics\}"`).Match(b) {
			t.Errorf("jobs/%s.nomad.hcl does not pass -metrics-listen its metrics port", f)
		}
	}
	slices.Sort(services)
	slices.Sort(fromJobs)
	if !slices.Equal(services, fromJobs) {
		t.Errorf("prometheus.yml discovers %v; the jobs register %v", services, fromJobs)
	}
}

// Every alert rule parses, uses metrics and labels the code defines, names in its annotations only labels its
// expression keeps, and has its runbook section in README.md.
func TestAlerts(t *testing.T) {
	code := codeMetrics(t)
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	decode(t, "alerts.yml", &file)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("%s: missing or repeated alert name", where)
			}
			seen[r.Alert] = true
			by := checkExpr(t, where, r.Expr, code)
			for _, a := range r.Annotations {
				for _, m := range labelsRef.FindAllStringSubmatch(a, -1) {
					if !slices.Contains(by, m[1]) {
						t.Errorf("%s: annotation names $labels.%s, which its expression does not keep (by %v)", where, m[1], by)
					}
				}
			}
			if r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("%s: needs a summary annotation and a severity label", where)
			}
			anchor := strings.ToLower(r.Alert)
			if r.Annotations["runbook"] != "README.md#"+anchor {
				t.Errorf("%s: runbook annotation %q, want README.md#%s", where, r.Annotations["runbook"], anchor)
			}
			if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(r.Alert) + `$`).Match(readme) {
				t.Errorf("%s: README.md has no runbook section titled %s", where, r.Alert)
			}
		}
	}
	for _, want := range []string{"WarrenSandboxStartFailures", "WarrenLedgerErrors", "WarrenRateLimitFallback", "WarrenMeshPeerLost"} {
		if !seen[want] {
			t.Errorf("alerts.yml has no %s", want)
		}
	}
}
