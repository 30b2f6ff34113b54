package prodstack_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/warren-mesh/warren/edge"
	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/stacktest"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/runner/snapshot"
	warren "github.com/warren-mesh/warren/sdk"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// topology is the production topology on this machine: the real servers and the roles as processes.
type topology struct {
	vs      *testenv.VaultServer
	cs      *testenv.ConsulServer
	ns      *testenv.NomadServer
	s3      *testenv.S3Server
	bucket  string
	model   *modelserver.Server
	billing *stacktest.Billing
	sched   *stacktest.Role
	edges   []*stacktest.Role
	reg     *consul.Registry
	key     secrets.Key // issuer acme's HMAC key, created through the billing API
	admin   func(method, path, body string) []byte
	wtRoots *x509.CertPool // trusts the edges' WebTransport certificate (-wt-cert)
}

// startTopology starts Vault, Consul, Nomad, PostgreSQL and S3, then `warren billing`, `warren scheduler`
// (Nomad raw_exec, warm pool of warm runners) and edges `warren edge` processes; it registers issuer acme
// through the billing API (its key lands in Vault).
func startTopology(t *testing.T, ctx context.Context, edges, warm int) *topology {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	bin := testenv.WarrenBinary(t)
	tp := &topology{}
	dsn := testenv.PostgreSQL(t)
	tp.vs = testenv.StartVault(t)
	tp.cs = testenv.StartConsul(t)
	tp.ns = testenv.StartNomad(t, testenv.NomadOptions{ConsulAddr: tp.cs.Addr()})
	tp.s3 = testenv.StartS3(t)
	tp.bucket = tp.s3.CreateBucket(t)
	tp.model = modelserver.New(modelserver.Options{})
	upstream, err := tp.model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.model.Close() })

	const schedKey = "scheduler-key-for-the-prod-e2e-test"
	vaultEnv := stacktest.VaultEnv(tp.vs)
	// Billing serves the workspace templates API (warren deploy) over the runners' bucket, where they read
	// templates from.
	tp.billing = stacktest.StartBillingWith(t, ctx, bin, tp.vs, dsn,
		[]string{"AWS_ACCESS_KEY_ID=" + tp.s3.AccessKey(), "AWS_SECRET_ACCESS_KEY=" + tp.s3.SecretKey()},
		"-s3-endpoint="+tp.s3.Endpoint(), "-s3-bucket="+tp.bucket, "-s3-path-style")
	tp.sched = stacktest.StartRole(t, bin, "scheduler", []string{"WARREN_SCHEDULER_KEY=" + schedKey, "NOMAD_ADDR=" + tp.ns.Addr()},
		"-listen", "127.0.0.1:0", "-region", "r1", "-consul", tp.cs.Addr(), "-db", dsn, "-nomad", tp.ns.Addr(),
		"-runner-binary", bin, "-nomad-driver", "raw_exec", "-warm-pool", fmt.Sprint(warm), "-runner-memory", "512", "-kill-timeout", "40s",
		"-runner-arg=-claude-cli="+cli, "-runner-arg=-model-upstream="+upstream,
		"-runner-arg=-default-model=claude-sonnet-4-5", "-runner-arg=-db="+dsn, "-runner-arg=-idle-timeout=3s",
		"-runner-arg=-s3-endpoint="+tp.s3.Endpoint(), "-runner-arg=-s3-bucket="+tp.bucket, "-runner-arg=-s3-path-style",
		"-runner-env=WARREN_MODEL_API_KEY=scripted", "-runner-env=AWS_ACCESS_KEY_ID="+tp.s3.AccessKey(),
		"-runner-env=AWS_SECRET_ACCESS_KEY="+tp.s3.SecretKey())
	wtCert, wtKey := writeWTCert(t, tp)
	for range edges {
		tp.edges = append(tp.edges, stacktest.StartRole(t, bin, "edge", append(vaultEnv, "WARREN_SCHEDULER_KEY="+schedKey),
			"-listen", "127.0.0.1:0", "-region", "r1", "-vault", tp.vs.Addr(), "-consul", tp.cs.Addr(), "-db", dsn,
			"-scheduler", "http://"+tp.sched.Addr, "-wt-cert", wtCert, "-wt-key", wtKey))
	}

	// A platform team registers its issuer through the billing API; the key lands in Vault.
	tp.admin = func(method, path, body string) []byte { return tp.billing.Admin(t, ctx, method, path, body) }
	tp.key = tp.billing.RegisterIssuer(t, ctx, "acme")
	if tp.reg, err = consul.New(consul.Config{Addr: tp.cs.Addr()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.reg.Close(context.Background()) })
	return tp
}

// writeWTCert writes the edges' WebTransport certificate (for 127.0.0.1) and key as PEM files, as an
// operator's CA would issue them; tp.wtRoots trusts it.
func writeWTCert(t *testing.T, tp *topology) (certPath, keyPath string) {
	t.Helper()
	c, err := (&edge.SelfSigned{Hosts: []string{"127.0.0.1"}}).GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = testenv.WriteKeyPair(t, t.TempDir(), "wt", c)
	tp.wtRoots = x509.NewCertPool()
	tp.wtRoots.AddCert(c.Leaf)
	return certPath, keyPath
}

// wtClient is user's SDK client through edge i, opening sessions over WebTransport only, trusting the
// edges' certificate as a verified one (no hash is published in production).
func (tp *topology) wtClient(t *testing.T, i int, user string) *warren.Client {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tp.wtRoots}}}
	return tp.client(t, i, user, warren.WithHTTPClient(hc), warren.WithTransport(warren.TransportWebTransport, 0))
}

// client is user's SDK client through edge i, with opts.
func (tp *topology) client(t *testing.T, i int, user string, opts ...warren.Option) *warren.Client {
	t.Helper()
	tok := stacktest.Mint(t, tp.key, "acme", user)
	c, err := warren.New("http://"+tp.edges[i].Addr, tok, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// deployTemplate writes files (path: content) to a directory and runs the real CLI, `warren deploy DIR
// -issuer acme` against the billing role's API with the admin key in $WARREN_ADMIN_KEY, as a platform team
// does; the billing API then lists it as acme's current template "default" (GET
// /v1/admin/templates/acme/default).
func deployTemplate(t *testing.T, ctx context.Context, tp *topology, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, testenv.WarrenBinary(t), "deploy", dir, "-issuer", "acme", "-url", "http://"+tp.billing.Addr)
	cmd.Env = append(os.Environ(), "WARREN_ADMIN_KEY="+tp.billing.AdminKey())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("warren deploy: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "deployed template default of acme: version ") {
		t.Fatalf("warren deploy printed %q", stdout.String())
	}
	var list struct {
		Versions []struct {
			Version string `json:"version"`
			Files   int    `json:"files"`
			Current bool   `json:"current"`
		} `json:"versions"`
	}
	if err := json.Unmarshal(tp.admin(http.MethodGet, "/v1/admin/templates/acme/default", ""), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Versions) != 1 || !list.Versions[0].Current || list.Versions[0].Files != len(files) {
		t.Fatalf("acme's template versions after warren deploy: %+v; want one current version of %d files", list.Versions, len(files))
	}
	t.Logf("warren deploy: %s", strings.TrimSpace(stdout.String()))
}

// TestProductionTopology is issue 4's end-to-end test: an agent session through separate edge, scheduler
// and billing processes over Vault, Consul, Nomad, PostgreSQL and S3. The platform team first deploys a
// workspace template with the real CLI (`warren deploy DIR` against the billing role, which keeps it in S3).
// A warm runner Nomad started ahead of demand is claimed for the user and starts with the template's files,
// Consul resolves it, the turn completes, the snapshot lands in S3, the job is stopped when the sandbox
// sleeps, and a new allocation (next epoch) resumes the conversation and the workspace.
func TestProductionTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	tp := startTopology(t, ctx, 1, 1)
	c := tp.client(t, 0, "ada")
	reg, ns, s3, bucket, model := tp.reg, tp.ns, tp.s3, tp.bucket, tp.model
	var err error
	deployTemplate(t, ctx, tp, map[string]string{"README.md": "acme's starter\n", "src/app/main.py": "print('hi')\n"})

	// The scheduler keeps one warm runner started in Nomad ahead of demand.
	stacktest.WaitFor(t, 60*time.Second, "the warm pool to fill", func() bool {
		n, err := reg.CountWarm(ctx, "r1")
		return err == nil && n == 1
	})

	// Turn one: the warm runner is claimed and assigned to ada, Consul resolves it.
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	sid := s.ID()
	if r := stacktest.Turn(t, ctx, s, "create plan.txt containing step one"); r.IsError {
		t.Fatalf("turn 1: %+v", r)
	}
	e1, err := reg.Lookup(ctx, "acme", "ada")
	if err != nil {
		t.Fatalf("Consul lookup: %v", err)
	}
	nc, err := nomadapi.NewClient(&nomadapi.Config{Address: ns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	// The Nomad client reports task states in batches: the runner may serve before Nomad says "running".
	var alloc1 *nomadapi.Allocation
	stacktest.WaitFor(t, 30*time.Second, "Nomad to report the runner's allocation running", func() bool {
		alloc1, _, err = nc.Allocations().Info(e1.Alloc, nil)
		if err != nil {
			t.Fatalf("Nomad allocation %q of the registered runner: %v", e1.Alloc, err)
		}
		return alloc1.ClientStatus == nomadapi.AllocClientStatusRunning
	})
	if job, _, err := nc.Jobs().Info(alloc1.JobID, nil); err != nil || job.Meta["warren_role"] != "warm" {
		t.Fatalf("job %s of the first sandbox: %v, role %q; want a claimed warm-pool job", alloc1.JobID, err, job.Meta["warren_role"])
	}
	// The new sandbox started from acme's template (read from S3 by the runner).
	for name, want := range map[string]string{"README.md": "acme's starter\n", "src/app/main.py": "print('hi')\n"} {
		if b, err := c.Sandbox().ReadFile(ctx, name); err != nil || string(b) != want {
			t.Fatalf("%s from the template = %q, %v; want %q", name, b, err, want)
		}
	}
	t.Logf("turn 1 served by allocation %s (job %s), epoch %d, at %s", alloc1.ID, alloc1.JobID, e1.Epoch, e1.Addr)
	_ = s.Close()

	// Idle: the runner snapshots to S3 and exits; its lock goes, the job is stopped.
	stacktest.WaitFor(t, 90*time.Second, "the sandbox to sleep", func() bool {
		_, err := reg.Lookup(ctx, "acme", "ada")
		return errors.Is(err, registry.ErrNotFound)
	})
	stacktest.WaitFor(t, 60*time.Second, "the sleeping sandbox's job to be stopped", func() bool {
		job, _, err := nc.Jobs().Info(alloc1.JobID, nil)
		return err != nil || (job.Stop != nil && *job.Stop) || (job.Status != nil && *job.Status == "dead")
	})
	store, err := blobs3.New(ctx, blobs3.Config{Endpoint: s3.Endpoint(), Region: s3.Region(), Bucket: bucket,
		AccessKey: s3.AccessKey(), SecretKey: s3.SecretKey(), PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.New(snapshot.Config{Store: store, Prefix: "sandboxes/" + registry.SandboxID("acme", "ada"),
		Dirs: map[string]string{"workspace": t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := snaps.Latest(ctx)
	if err != nil || !ok || m.Epoch != e1.Epoch {
		t.Fatalf("latest snapshot in S3 = %+v, %v, %v; want one of epoch %d", m, ok, err, e1.Epoch)
	}

	// Wake: a new allocation under the next epoch restores the workspace and the conversation from S3.
	s2, err := c.Dial(ctx, &warren.SessionOptions{SessionID: sid})
	if err != nil {
		t.Fatalf("wake: %v", err)
	}
	defer s2.Close()
	if b, err := c.Sandbox().ReadFile(ctx, "plan.txt"); err != nil || string(b) != "step one" {
		t.Fatalf("plan.txt after wake = %q, %v", b, err)
	}
	if b, err := c.Sandbox().ReadFile(ctx, "README.md"); err != nil || string(b) != "acme's starter\n" {
		t.Fatalf("the template's README.md after wake = %q, %v", b, err)
	}
	before := len(model.Requests())
	if r := stacktest.Turn(t, ctx, s2, "and then?"); r.IsError {
		t.Fatalf("turn after wake: %+v", r)
	}
	found := false
	for _, r := range model.Requests()[before:] {
		if r.Main && strings.Contains(string(r.Body), "create plan.txt containing step one") {
			found = true
		}
	}
	if !found {
		t.Fatal("the woken conversation lost the earlier turn")
	}
	e2, err := reg.Lookup(ctx, "acme", "ada")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after wake: allocation %s, epoch %d; snapshot of epoch %d seq %d was in S3", e2.Alloc, e2.Epoch, m.Epoch, m.Seq)
	if e2.Epoch != e1.Epoch+1 || e2.Alloc == e1.Alloc {
		t.Fatalf("after wake: epoch %d alloc %s; want epoch %d on a new allocation (was %s)", e2.Epoch, e2.Alloc, e1.Epoch+1, e1.Alloc)
	}
}

// TestSessionCapAcrossEdgeProcesses: a quota of one concurrent session holds across two `warren edge`
// processes (leases in CockroachDB): the second connection, through the other edge, is refused with
// concurrency_limit; after the first closes, the other edge admits it. The issuer-wide cap and a user's
// connect rate hold across the two edges too.
func TestSessionCapAcrossEdgeProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tp := startTopology(t, ctx, 2, 0)
	tp.admin(http.MethodPut, "/v1/quotas/acme/users/bo",
		`{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime","max_concurrent_sessions":1,"revision":0}`)
	// The first session over WebTransport (-wt-cert on the edges): the cap holds across transports.
	a, b := tp.wtClient(t, 0, "bo"), tp.client(t, 1, "bo")
	s1, err := a.Dial(ctx, nil)
	if err != nil {
		t.Fatalf("first session through edge A: %v", err)
	}
	if s1.Transport() != warren.TransportWebTransport {
		t.Fatalf("first session over %s, want webtransport", s1.Transport())
	}
	if _, err := b.Dial(ctx, nil); !warren.IsCode(err, warren.CodeConcurrencyLimit) {
		t.Fatalf("second session through edge B: %v, want concurrency_limit", err)
	}
	_ = s1.Close()
	stacktest.WaitFor(t, 30*time.Second, "edge B to admit once A's lease is released", func() bool {
		s, err := b.Dial(ctx, nil)
		if err == nil {
			_ = s.Close()
		}
		return err == nil
	})

	// The issuer-wide cap (max_issuer_sessions on the issuer's default quota) counts every user of the
	// issuer across both edges.
	tp.admin(http.MethodPut, "/v1/quotas/acme",
		`{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime","max_concurrent_sessions":-1,"max_issuer_sessions":1,"revision":0}`)
	// bo's last session is released by edge B after its client closed it, not before Close returns: until
	// then it is the issuer's one session.
	var s2 *warren.Session
	stacktest.WaitFor(t, 30*time.Second, "cy admitted through edge A once bo's session is released", func() bool {
		s2, err = tp.client(t, 0, "cy").Dial(ctx, nil)
		if err != nil && !warren.IsCode(err, warren.CodeConcurrencyLimit) {
			t.Fatalf("cy through edge A: %v", err)
		}
		return err == nil
	})
	if _, err := tp.client(t, 1, "di").Dial(ctx, nil); !warren.IsCode(err, warren.CodeConcurrencyLimit) {
		t.Fatalf("di through edge B while cy holds the issuer's one session: %v, want concurrency_limit", err)
	}
	_ = s2.Close()

	// Connect rates are shared buckets too: with 2 connects a minute, one through each edge spends them,
	// and a third through either is refused (each edge alone would still have a token).
	tp.admin(http.MethodPut, "/v1/quotas/acme",
		`{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime","max_concurrent_sessions":-1,"max_issuer_sessions":-1,"revision":1}`)
	tp.admin(http.MethodPut, "/v1/quotas/acme/users/ed",
		`{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime","max_concurrent_sessions":-1,"connects_per_minute":2,"revision":0}`)
	for i := range 2 {
		s, err := tp.client(t, i, "ed").Dial(ctx, nil)
		if err != nil {
			t.Fatalf("connect %d of 2 a minute, through edge %d: %v", i+1, i, err)
		}
		_ = s.Close()
	}
	for i := range 2 {
		if _, err := tp.client(t, i, "ed").Dial(ctx, nil); !warren.IsCode(err, warren.CodeRateLimited) {
			t.Fatalf("a third connect within the minute, through edge %d: %v, want rate_limited", i, err)
		}
	}
}
