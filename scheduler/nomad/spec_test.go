package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/scheduler"
)

func spec(issuer, user string) scheduler.Spec {
	return scheduler.Spec{ID: registry.SandboxID(issuer, user), Issuer: issuer, User: user, Epoch: 3, Region: "r1"}
}

func TestCheckSpec(t *testing.T) {
	ok := spec("iss", "alice")
	for _, tc := range []struct {
		name string
		edit func(*scheduler.Spec)
		ok   bool
	}{
		{"plain", func(*scheduler.Spec) {}, true},
		{"odd user", func(s *scheduler.Spec) { s.User = `a"b\c $HOME %{x} ${ } $${y} é ✓` }, true},
		{"interpolating user", func(s *scheduler.Spec) { s.User = "${attr.unique.hostname}" }, true},
		{"short id", func(s *scheduler.Spec) { s.ID = "abc" }, false},
		{"upper-case id", func(s *scheduler.Spec) { s.ID = strings.ToUpper(s.ID) }, false},
		{"zero epoch", func(s *scheduler.Spec) { s.Epoch = 0 }, false},
		{"empty user", func(s *scheduler.Spec) { s.User = "" }, false},
		{"empty issuer", func(s *scheduler.Spec) { s.Issuer = "" }, false},
		{"NUL", func(s *scheduler.Spec) { s.User = "a\x00b" }, false},
		{"invalid UTF-8", func(s *scheduler.Spec) { s.User = "a\xffb" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			err := CheckSpec(s)
			if tc.ok && err != nil {
				t.Fatalf("CheckSpec(%+v) = %v, want nil", s, err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("CheckSpec(%+v) = %v, want ErrInvalidSpec", s, err)
			}
		})
	}
}

// FuzzSpecVariables: whatever issuer and user strings a token carries, a spec is either rejected with
// ErrInvalidSpec or becomes variables that hand Nomad exactly those strings. (That the template then passes
// them to the runner verbatim is TestNomad/UserStringsArriveVerbatim, against a real Nomad.)
func FuzzSpecVariables(f *testing.F) {
	for _, s := range [][2]string{
		{"iss", "alice"},
		{"https://issuer.example", `a"b\c`},
		{"iss", "${NOMAD_ALLOC_ID}"},
		{"iss", "$${attr.x}"},
		{"iss", "%{ if true }x%{ endif }"},
		{"iss", "line\nbreak\ttab\u2028"},
		{"\x00", "\xff"},
		{"iss", "${}"},
		{"iss", "${a b}"},
	} {
		f.Add(s[0], s[1])
	}
	d := &Driver{cfg: Config{Datacenters: []string{"dc1"}, Driver: "raw_exec"}}
	f.Fuzz(func(t *testing.T, issuer, user string) {
		sp := spec(issuer, user)
		if err := CheckSpec(sp); err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("CheckSpec error %v does not wrap ErrInvalidSpec", err)
			}
			return
		}
		vars, err := d.variables(sp, false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(vars, "{") {
			t.Fatalf("variables %q do not start with '{': Nomad would not read them as JSON", vars)
		}
		var back struct {
			Issuer string `json:"issuer"`
			User   string `json:"user"`
			Epoch  int64  `json:"epoch"`
		}
		if err := json.Unmarshal([]byte(vars), &back); err != nil {
			t.Fatal(err)
		}
		if back.Issuer != issuer || back.User != user || back.Epoch != sp.Epoch {
			t.Fatalf("variables carry %q/%q/%d, want %q/%q/%d", back.Issuer, back.User, back.Epoch, issuer, user, sp.Epoch)
		}
	})
}

// variablesOf is the sandbox job variables d makes for a spec, decoded.
func variablesOf(t *testing.T, d *Driver) map[string]any {
	t.Helper()
	vars, err := d.variables(spec("iss", "u"), false)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(vars), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestVariablesOmitUnsetSettings(t *testing.T) {
	m := variablesOf(t, &Driver{cfg: Config{Datacenters: []string{"dc1"}, Driver: "exec"}})
	for _, k := range []string{"cpu", "memory", "kill_timeout", "warren_binary", "webhook_secret_path", "vault_role"} {
		if _, ok := m[k]; ok {
			t.Errorf("variable %s set although unconfigured: the template's default must apply", k)
		}
	}
	if m["runner_args"] == nil || m["env"] == nil {
		t.Errorf("runner_args and env must be present (empty), got %v", m)
	}
}

// The token's template reaches the runner as its last flags (after the operator's, so it wins over a
// -template default among them); none named: no flag, the runner's default applies. A name that is not a
// template name is refused before any job is written.
func TestVariablesCarryTemplate(t *testing.T) {
	d := &Driver{cfg: Config{Datacenters: []string{"dc1"}, Driver: "exec", RunnerArgs: []string{"-template", "base"}}}
	runnerArgsOf := func(sp scheduler.Spec) []any {
		t.Helper()
		vars, err := d.variables(sp, false)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			RunnerArgs []any `json:"runner_args"`
		}
		if err := json.Unmarshal([]byte(vars), &m); err != nil {
			t.Fatal(err)
		}
		return m.RunnerArgs
	}
	sp := spec("iss", "u")
	if got := runnerArgsOf(sp); !reflect.DeepEqual(got, []any{"-template", "base"}) {
		t.Fatalf("runner_args without a template claim = %v", got)
	}
	sp.Template = "py"
	if got := runnerArgsOf(sp); !reflect.DeepEqual(got, []any{"-template", "base", "-template", "py"}) {
		t.Fatalf("runner_args with template py = %v", got)
	}
	if len(d.cfg.RunnerArgs) != 2 {
		t.Fatalf("the driver's RunnerArgs were changed: %v", d.cfg.RunnerArgs)
	}
	if err := CheckSpec(sp); err != nil {
		t.Fatalf("CheckSpec(template py) = %v", err)
	}
	sp.Template = "../py"
	if err := CheckSpec(sp); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("CheckSpec(template ../py) = %v, want ErrInvalidSpec", err)
	}
}

func TestJobID(t *testing.T) {
	s := spec("iss", "alice")
	if got, want := JobID(s), "sandbox-"+s.ID+"-e3"; got != want {
		t.Fatalf("JobID = %q, want %q", got, want)
	}
}

// A Nomad that cannot be reached, or answers 5xx, is ErrUnavailable; a 4xx answer is not.
func TestNomadErrorsClassified(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no leader", http.StatusInternalServerError)
	}))
	defer failing.Close()
	rejecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "bad job", http.StatusBadRequest)
	}))
	defer rejecting.Close()
	for _, tc := range []struct {
		name, url   string
		unavailable bool
	}{
		{"unreachable", closedURL, true},
		{"5xx", failing.URL, true},
		{"4xx", rejecting.URL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := fakeDriver(t, tc.url)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := d.Start(ctx, spec("iss", "alice"))
			if err == nil {
				t.Fatal("Start succeeded")
			}
			if got := errors.Is(err, ErrUnavailable); got != tc.unavailable {
				t.Fatalf("Start = %v; errors.Is(ErrUnavailable) = %v, want %v", err, got, tc.unavailable)
			}
			err = d.Stop(ctx, "0b2a4b47-0000-0000-0000-000000000000")
			if tc.unavailable && !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Stop = %v, want ErrUnavailable", err)
			}
		})
	}
}

func TestCancelledStartTouchesNothing(t *testing.T) {
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls++
		http.Error(w, "unexpected", http.StatusInternalServerError)
	}))
	defer srv.Close()
	client, _ := api.NewClient(&api.Config{Address: srv.URL})
	d, err := New(Config{Client: client, Registry: mem.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Start(ctx, spec("iss", "alice")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v, want context.Canceled", err)
	}
	if calls != 0 {
		t.Fatalf("a cancelled start made %d requests to Nomad", calls)
	}
}

// The operator's webhook secret reaches the template's variables only when configured.
func TestVariablesWebhookSecret(t *testing.T) {
	m := variablesOf(t, &Driver{cfg: Config{Datacenters: []string{"dc1"}, Driver: "exec",
		WebhookSecretPath: "secret/data/warren/webhook", VaultRole: "warren-eu-runner"}})
	if m["webhook_secret_path"] != "secret/data/warren/webhook" || m["vault_role"] != "warren-eu-runner" {
		t.Fatalf("variables %v, want webhook_secret_path and vault_role", m)
	}
}
