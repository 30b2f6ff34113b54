package multiregion_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/jackc/pgx/v5/pgxpool"

	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/stacktest"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/runner/snapshot"
	"github.com/warren-mesh/warren/scheduler"
	schedcockroach "github.com/warren-mesh/warren/scheduler/cockroach"
	warren "github.com/warren-mesh/warren/sdk"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	issuer   = "acme"
	leaseTTL = 10 * time.Second // scheduler -lease-ttl: the minimum
	// startTimeout is the scheduler's -start-timeout: a claim's first lease is this plus the TTL.
	startTimeout = 20 * time.Second
)

// region is one region's servers and roles.
type region struct {
	name     string
	cs       *testenv.ConsulServer
	ns       *testenv.NomadServer
	nomad    *nomadapi.Client
	s3       *testenv.S3Server
	bucket   string
	sched    *stacktest.Role
	edge     *stacktest.Role
	edgeEnv  []string
	edgeArgs []string
	relay    *relay
	reg      *consul.Registry // the region's Consul as a test reads it
}

// topology is two regions, a and b, over one Vault and one PostgreSQL.
type topology struct {
	root       *testing.T // the test the topology lives as long as
	bin        string
	vs         *testenv.VaultServer
	pool       *pgxpool.Pool
	placements *schedcockroach.Placements
	model      *modelserver.Server
	billing    *stacktest.Billing
	key        secrets.Key
	a, b       *region
}

func startTopology(t *testing.T, ctx context.Context) *topology {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	tp := &topology{root: t, bin: testenv.WarrenBinary(t)}
	dsn := testenv.PostgreSQL(t)
	tp.vs = testenv.StartVault(t)
	tp.vs.MountMeshPKI(t, "pki", "edge") // the mesh's certificates, as in production
	tp.model = modelserver.New(modelserver.Options{Delay: 30 * time.Millisecond})
	upstream, err := tp.model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.model.Close() })
	if tp.pool, err = cockroachdb.Open(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tp.pool.Close)
	tp.billing = stacktest.StartBilling(t, ctx, tp.bin, tp.vs, dsn)
	tp.key = tp.billing.RegisterIssuer(t, ctx, issuer)
	// No cap on sessions and generous connect rates: the cases connect a lot, from both regions.
	tp.billing.Admin(t, ctx, http.MethodPut, "/v1/quotas/"+issuer, `{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime",`+
		`"max_concurrent_sessions":-1,"max_issuer_sessions":-1,"connects_per_minute":100000,"issuer_connects_per_minute":100000,`+
		`"prompts_per_minute":100000,"issuer_prompts_per_minute":100000,"revision":0}`)

	// The servers of each region; one S3 account reaches both regions' buckets.
	tp.a, tp.b = &region{name: "a"}, &region{name: "b"}
	for i, r := range []*region{tp.a, tp.b} {
		r.cs = testenv.StartConsulWith(t, testenv.ConsulOptions{Datacenter: "dc-" + r.name})
		r.ns = testenv.StartNomad(t, testenv.NomadOptions{ConsulAddr: r.cs.Addr(), Region: r.name, Datacenter: "dc-" + r.name})
		if r.nomad, err = nomadapi.NewClient(&nomadapi.Config{Address: r.ns.Addr()}); err != nil {
			t.Fatal(err)
		}
		opts := testenv.S3Options{}
		if i == 1 {
			opts = testenv.S3Options{AccessKey: tp.a.s3.AccessKey(), SecretKey: tp.a.s3.SecretKey()}
		}
		r.s3 = testenv.StartS3With(t, opts)
		r.bucket = r.s3.CreateBucket(t)
		if r.reg, err = consul.New(consul.Config{Addr: r.cs.Addr()}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.reg.Close(context.Background()) })
	}
	tp.a.cs.JoinWAN(t, tp.b.cs)
	tp.a.ns.Join(t, tp.b.ns)

	for _, r := range []*region{tp.a, tp.b} {
		other := tp.other(r)
		key := "scheduler-key-of-region-" + r.name + "-for-tests"
		r.sched = stacktest.StartRole(t, tp.bin, "scheduler", []string{"WARREN_SCHEDULER_KEY=" + key, "NOMAD_ADDR=" + r.ns.Addr()},
			"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-region", r.name, "-consul", r.cs.Addr(), "-db", dsn, "-nomad", r.ns.Addr(),
			"-datacenter", r.ns.Datacenter(), "-lease-ttl", leaseTTL.String(), "-start-timeout", startTimeout.String(),
			"-runner-binary", tp.bin, "-nomad-driver", "raw_exec", "-runner-memory", "512", "-kill-timeout", "40s",
			"-runner-arg=-claude-cli="+cli, "-runner-arg=-model-upstream="+upstream,
			"-runner-arg=-default-model=claude-sonnet-4-5", "-runner-arg=-db="+dsn, "-runner-arg=-idle-timeout=3s",
			"-runner-arg=-s3-endpoint="+r.s3.Endpoint(), "-runner-arg=-s3-bucket="+r.bucket, "-runner-arg=-s3-path-style",
			"-runner-arg=-snapshot-region="+other.name+"=s3://"+other.bucket+"?endpoint="+other.s3.Endpoint()+"&path-style=true",
			"-runner-env=WARREN_MODEL_API_KEY=scripted", "-runner-env=AWS_ACCESS_KEY_ID="+r.s3.AccessKey(),
			"-runner-env=AWS_SECRET_ACCESS_KEY="+r.s3.SecretKey())
		r.relay = startRelay(t)
		r.edgeEnv = append(stacktest.VaultEnv(tp.vs), "WARREN_SCHEDULER_KEY="+key)
		r.edgeArgs = []string{"-listen", "127.0.0.1:0", "-region", r.name, "-vault", tp.vs.Addr(), "-consul", r.cs.Addr(), "-db", dsn,
			"-scheduler", "http://" + r.sched.Addr, "-public-url", r.relay.URL(), "-edge-id", "edge-" + r.name,
			"-mesh-listen", "127.0.0.1:0", "-mesh-pki-role", "edge", "-mesh-pki-mount", "pki", "-metrics-listen", "127.0.0.1:0"}
		tp.startEdge(t, r)
	}
	// Each edge lists both regions (its directory cache is refreshed every 2 s).
	for _, r := range []*region{tp.a, tp.b} {
		stacktest.WaitFor(t, 30*time.Second, "edge "+r.name+" to list both regions", func() bool {
			rs, err := tp.client(t, r, "probe").Regions(ctx)
			return err == nil && len(rs.Regions) == 2
		})
	}
	tp.placements, err = schedcockroach.New(ctx, schedcockroach.Config{Pool: tp.pool})
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func (tp *topology) other(r *region) *region {
	if r == tp.a {
		return tp.b
	}
	return tp.a
}

// startEdge starts (or starts again) region r's edge behind its relay; it runs as long as the topology.
func (tp *topology) startEdge(t *testing.T, r *region) {
	t.Helper()
	r.edge = stacktest.StartRoleFor(t, tp.root, tp.bin, "edge", r.edgeEnv, r.edgeArgs...)
	r.relay.setTarget(r.edge.Addr)
}

// client is user's SDK client through region r's relay.
func (tp *topology) client(t *testing.T, r *region, user string, opts ...warren.Option) *warren.Client {
	t.Helper()
	c, err := warren.New(r.relay.URL(), stacktest.Mint(t, tp.key, issuer, user), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (tp *topology) placement(t *testing.T, ctx context.Context, user string) scheduler.Placement {
	t.Helper()
	p, err := tp.placements.Get(ctx, issuer, user)
	if err != nil {
		t.Fatalf("placement of %s: %v", user, err)
	}
	return p
}

// owner checks the registries: user's runner is registered in region r's Consul at epoch, and not in the
// other region's (when that one's Consul runs).
func (tp *topology) owner(t *testing.T, ctx context.Context, r *region, user string, epoch int64) registry.Entry {
	t.Helper()
	e, err := r.reg.Lookup(ctx, issuer, user)
	if err != nil || e.Epoch != epoch {
		t.Fatalf("region %s's registry has %s at %+v, %v; want epoch %d", r.name, user, e, err, epoch)
	}
	if !tp.other(r).cs.Running() {
		return e
	}
	if o, err := tp.other(r).reg.Lookup(ctx, issuer, user); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("region %s's registry has %s too: %+v, %v", tp.other(r).name, user, o, err)
	}
	return e
}

// jobs lists the Nomad jobs of user's sandbox in region r, one per epoch started there.
func (tp *topology) jobs(t *testing.T, r *region, user string) []string {
	t.Helper()
	js, _, err := r.nomad.Jobs().PrefixList("sandbox-" + registry.SandboxID(issuer, user))
	if err != nil {
		t.Fatalf("Nomad jobs of region %s: %v", r.name, err)
	}
	var ids []string
	for _, j := range js {
		ids = append(ids, j.ID)
	}
	return ids
}

// latest is the latest snapshot of user's sandbox in region r's bucket (ok false: none).
func (tp *topology) latest(t *testing.T, ctx context.Context, r *region, user string) (snapshot.Manifest, bool) {
	t.Helper()
	store, err := blobs3.New(ctx, blobs3.Config{Endpoint: r.s3.Endpoint(), Region: r.s3.Region(), Bucket: r.bucket,
		AccessKey: r.s3.AccessKey(), SecretKey: r.s3.SecretKey(), PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.New(snapshot.Config{Store: store, Prefix: "sandboxes/" + registry.SandboxID(issuer, user),
		Region: r.name, Dirs: map[string]string{"workspace": t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := snaps.Latest(ctx)
	if err != nil {
		t.Fatalf("latest snapshot of %s in region %s: %v", user, r.name, err)
	}
	return m, ok
}

// manifests lists the snapshot manifests of user's sandbox in region r's bucket, as versitygw keeps them
// on disk (<epoch>-<seq>.json): every commit, retained or not yet collected.
func (tp *topology) manifests(t *testing.T, r *region, user string) []string {
	t.Helper()
	dir := filepath.Join(r.s3.DataDir(), r.bucket, "sandboxes", registry.SandboxID(issuer, user), "manifests")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// usage is the ledger's record of user: its usage events by key and its holds.
func (tp *topology) usage(t *testing.T, ctx context.Context, user string) (events []string, aiMicros int64, holds int) {
	t.Helper()
	rows, err := tp.pool.Query(ctx, `SELECT key, ai_micros FROM usage_events WHERE issuer = $1 AND "user" = $2 ORDER BY key`, issuer, user)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var ai int64
		if err := rows.Scan(&k, &ai); err != nil {
			t.Fatal(err)
		}
		events, aiMicros = append(events, k), aiMicros+ai
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := tp.pool.QueryRow(ctx, `SELECT count(*) FROM holds WHERE issuer = $1 AND "user" = $2`, issuer, user).Scan(&holds); err != nil {
		t.Fatal(err)
	}
	return events, aiMicros, holds
}

// metric is the sum of the samples of a counter of the role whose metrics listener is at base whose labels
// include every one of labels.
func metric(t *testing.T, base, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		if slices.ContainsFunc(labels, func(x string) bool { return !strings.Contains(l, x) }) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

// starts sums the schedulers' sandbox starts of an outcome ("ok", "owned", "error").
func (tp *topology) starts(t *testing.T, outcome string) float64 {
	t.Helper()
	n := 0.0
	for _, r := range []*region{tp.a, tp.b} {
		n += metric(t, "http://"+r.sched.Metrics, "warren_sandbox_starts_total", `outcome="`+outcome+`"`)
	}
	return n
}

// resumedInB checks user's sandbox, resumed in b from epoch 1 in a through session s of client c: the file
// written in a by "create <file> containing <content>" is there, the next turn's model request carries that
// earlier turn, the placement and b's registry are at epoch 2 in b, and b's runner snapshots to b's bucket.
func (tp *topology) resumedInB(t *testing.T, ctx context.Context, c *warren.Client, s *warren.Session, user, file, content string) {
	t.Helper()
	if got, err := c.Sandbox().ReadFile(ctx, file); err != nil || string(got) != content {
		t.Fatalf("%s after the resume in b: %q, %v", file, got, err)
	}
	from := len(tp.model.Requests())
	turnOK(t, ctx, s, "and then?")
	if tp.requestsWith(from, "create "+file+" containing "+content) == 0 {
		t.Fatal("the conversation resumed in b lost the turn taken in a")
	}
	if p := tp.placement(t, ctx, user); p.Region != "b" || p.Epoch != 2 || p.State != scheduler.StateRunning {
		t.Fatalf("placement after the resume: %+v; want running in b at epoch 2", p)
	}
	tp.owner(t, ctx, tp.b, user, 2)
	stacktest.WaitFor(t, 30*time.Second, "b's snapshot of epoch 2", func() bool {
		m, ok := tp.latest(t, ctx, tp.b, user)
		return ok && m.Epoch == 2 && m.Region == "b"
	})
}

// requestsWith counts the agent loop's model requests after from whose body contains s.
func (tp *topology) requestsWith(from int, s string) int {
	n := 0
	for _, r := range tp.model.Requests()[from:] {
		if r.Main && strings.Contains(string(r.Body), s) {
			n++
		}
	}
	return n
}

func dial(t *testing.T, ctx context.Context, c *warren.Client, opts *warren.SessionOptions) *warren.Session {
	t.Helper()
	s, err := c.Dial(ctx, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func turnOK(t *testing.T, ctx context.Context, s *warren.Session, prompt string) {
	t.Helper()
	if r := stacktest.Turn(t, ctx, s, prompt); r.IsError {
		t.Fatalf("turn %q: %+v", prompt, r)
	}
}

// TestTwoRegions runs the cases of issue #10 item 8 on one two-region topology, in order: each leaves the
// topology as the next expects (the last takes region a down).
func TestTwoRegions(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	tp := startTopology(t, ctx)
	t.Logf("two regions up in %s", time.Since(start).Round(time.Millisecond))
	for _, c := range []struct {
		name string
		run  func(*testing.T, context.Context, *topology)
	}{
		{"NearestFollowsDelay", testNearest},
		{"ForwardToOwner", testForward},
		{"ResumeAsleepInOtherRegion", testResume},
		{"RaceAcrossRegions", testRace},
		{"FailoverWhenEdgeDies", testFailover},
		{"RegionDown", testRegionDown},
	} {
		if !t.Run(c.name, func(t *testing.T) { c.run(t, ctx, tp) }) {
			return // the later cases build on the earlier ones' topology
		}
	}
}

// testNearest: the SDK's nearest-edge choice follows the relays' delays, with hysteresis: a region only a
// little faster does not move a client, a clearly faster one does.
func testNearest(t *testing.T, ctx context.Context, tp *topology) {
	defer tp.a.relay.setDelay(0)
	defer tp.b.relay.setDelay(0)
	// a is far (80 ms round trip), b near (4 ms): Nearest, seeded with a, picks b.
	tp.a.relay.setDelay(40 * time.Millisecond)
	tp.b.relay.setDelay(2 * time.Millisecond)
	c, probes, err := warren.Nearest(ctx, tp.a.relay.URL(), stacktest.Mint(t, tp.key, issuer, "nina"), 5)
	if err != nil {
		t.Fatal(err)
	}
	median := func(ps []warren.Probe, name string) time.Duration {
		i := slices.IndexFunc(ps, func(p warren.Probe) bool { return p.Region.Name == name })
		if i < 0 || ps[i].Err != nil {
			t.Fatalf("no probe of region %s: %+v", name, ps)
		}
		return ps[i].Median()
	}
	t.Logf("a far: a %v, b %v", median(probes, "a"), median(probes, "b"))
	if c.URL() != tp.b.relay.URL() || median(probes, "a") < 80*time.Millisecond {
		t.Fatalf("Nearest chose %s with probes a %v b %v; want b (%s)", c.URL(), median(probes, "a"), median(probes, "b"), tp.b.relay.URL())
	}
	rs, err := c.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A client on b probes again with one-way delays da and db; it should then be on want.
	choose := func(what string, da, db time.Duration, want string) {
		t.Helper()
		tp.a.relay.setDelay(da)
		tp.b.relay.setDelay(db)
		probes := warren.ProbeRegions(ctx, nil, rs.Regions, 5)
		t.Logf("%s: a %v, b %v", what, median(probes, "a"), median(probes, "b"))
		if got := (warren.Hysteresis{}).Choose("b", probes); got != want {
			t.Fatalf("%s: hysteresis put the client on %s for a %v against b %v; want %s", what, got, median(probes, "a"), median(probes, "b"), want)
		}
	}
	// a becomes a little nearer than b (60 ms against 66 ms): not clearly better (by 10 ms and to below 2/3),
	// the client stays on b. (Round trips long enough that the machine's noise cannot make a clearly better.)
	choose("a slightly nearer", 30*time.Millisecond, 33*time.Millisecond, "b")
	// a becomes clearly nearer (2 ms against 80 ms): the client moves to a.
	choose("a clearly nearer", time.Millisecond, 40*time.Millisecond, "a")
}

// testForward: a user whose sandbox runs in region a connects through region b's edge: b forwards over the
// mesh to a's edge, the turn completes on the one runner in a, and nothing is claimed or started in b.
func testForward(t *testing.T, ctx context.Context, tp *topology) {
	const user = "ann"
	sa := dial(t, ctx, tp.client(t, tp.a, user), nil)
	turnOK(t, ctx, sa, "create a.txt containing from a")
	p := tp.placement(t, ctx, user)
	if p.Region != "a" || p.Epoch != 1 || p.State != scheduler.StateRunning {
		t.Fatalf("placement after a's turn: %+v; want running in a at epoch 1", p)
	}
	e := tp.owner(t, ctx, tp.a, user, 1)

	before := metric(t, "http://"+tp.b.edge.Metrics, "warren_edge_forwarded_total", `kind="ws"`, `region="a"`, `outcome="ok"`)
	cb := tp.client(t, tp.b, user)
	sb := dial(t, ctx, cb, nil)
	turnOK(t, ctx, sb, "create b.txt containing through b")
	if got, err := cb.Sandbox().ReadFile(ctx, "b.txt"); err != nil || string(got) != "through b" {
		t.Fatalf("b.txt through b's edge: %q, %v", got, err)
	}
	if got, err := tp.client(t, tp.a, user).Sandbox().ReadFile(ctx, "b.txt"); err != nil || string(got) != "through b" {
		t.Fatalf("b.txt through a's edge: %q, %v", got, err)
	}
	if n := metric(t, "http://"+tp.b.edge.Metrics, "warren_edge_forwarded_total", `kind="ws"`, `region="a"`, `outcome="ok"`); n != before+1 {
		t.Fatalf("b's edge forwarded %v agent channels to a, want %v", n, before+1)
	}
	if sb.Region() != "a" {
		t.Fatalf("the forwarded session says region %q, want a (where the runner is)", sb.Region())
	}
	// Still one runner: the same placement, registration and allocation; no job in b.
	if p2 := tp.placement(t, ctx, user); p2.Region != "a" || p2.Epoch != 1 || p2.Alloc != p.Alloc {
		t.Fatalf("placement after the forwarded turn: %+v; was %+v", p2, p)
	}
	if e2 := tp.owner(t, ctx, tp.a, user, 1); e2.Alloc != e.Alloc {
		t.Fatalf("registered allocation %s, was %s", e2.Alloc, e.Alloc)
	}
	if ja, jb := tp.jobs(t, tp.a, user), tp.jobs(t, tp.b, user); len(ja) != 1 || len(jb) != 0 {
		t.Fatalf("sandbox jobs: a %v, b %v; want one in a", ja, jb)
	}
	// The ledger settled both turns' model calls against the user, once each, and holds nothing back.
	stacktest.WaitFor(t, 10*time.Second, "the holds to settle", func() bool {
		_, _, holds := tp.usage(t, ctx, user)
		return holds == 0
	})
	if ev, ai, _ := tp.usage(t, ctx, user); ai <= 0 || !slices.ContainsFunc(ev, func(k string) bool { return strings.HasPrefix(k, "ai/") }) {
		t.Fatalf("ledger of %s: events %v, %d µ$; want the turns' model usage", user, ev, ai)
	}
}

// testResume: a's sandbox sleeps (snapshot in a's bucket, job stopped); the user connects through b: the
// sandbox resumes in b under the next epoch from a's snapshot, files and conversation intact, and b's
// runner writes its snapshots to b's bucket only.
func testResume(t *testing.T, ctx context.Context, tp *topology) {
	const user = "ben"
	ca := tp.client(t, tp.a, user)
	sa := dial(t, ctx, ca, nil)
	sid := sa.ID()
	turnOK(t, ctx, sa, "create plan.txt containing step one")
	tp.owner(t, ctx, tp.a, user, 1)
	_ = sa.Close()
	stacktest.WaitFor(t, 90*time.Second, "the sandbox to sleep", func() bool {
		p, err := tp.placements.Get(ctx, issuer, user)
		return err == nil && p.State == scheduler.StateAsleep
	})
	m1, ok := tp.latest(t, ctx, tp.a, user)
	if !ok || m1.Epoch != 1 || m1.Region != "a" {
		t.Fatalf("a's bucket after sleep: %+v, %v; want a snapshot of epoch 1", m1, ok)
	}
	if _, err := tp.a.reg.Lookup(ctx, issuer, user); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("a's registry still has the sleeping sandbox: %v", err)
	}

	cb := tp.client(t, tp.b, user)
	tp.resumedInB(t, ctx, cb, dial(t, ctx, cb, &warren.SessionOptions{SessionID: sid}), user, "plan.txt", "step one")
	// The sleeping sandbox's job in a is gone; b runs epoch 2's.
	if ja, jb := tp.jobs(t, tp.a, user), tp.jobs(t, tp.b, user); len(ja) != 0 || len(jb) != 1 || !strings.HasSuffix(jb[0], "-e2") {
		t.Fatalf("sandbox jobs: a %v, b %v; want epoch 2's in b alone", ja, jb)
	}
	// a's bucket keeps epoch 1's snapshot as it was.
	if m, ok := tp.latest(t, ctx, tp.a, user); !ok || m.Epoch != m1.Epoch || m.Seq != m1.Seq {
		t.Fatalf("a's bucket now has %+v, %v; want epoch 1's snapshot %d unchanged", m, ok, m1.Seq)
	}
}

// testRace: 100 connects of one new user at once, half through each region's edge (requests of the
// sandbox API: each is admitted and asks its region's scheduler for the user's runner as an agent channel
// does; a sandbox holds at most two live agent sessions): exactly one claim wins (epoch 1, one start, one runner, one registration), every connect is served (the
// other region's forward to the winner), and the only snapshots are the owner's, in its region's bucket: no
// stale commit anywhere.
func testRace(t *testing.T, ctx context.Context, tp *topology) {
	const user, n = "cat", 100
	ok0, owned0 := tp.starts(t, "ok"), tp.starts(t, "owned")
	clients := []*warren.Client{tp.client(t, tp.a, user), tp.client(t, tp.b, user)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			if _, err := clients[i%2].Sandbox().List(ctx, "."); err != nil {
				errs[i] = fmt.Errorf("connect %d through %s: %w", i, clients[i%2].URL(), err)
			}
		})
	}
	close(gate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("connects refused: %v", err)
	}
	p := tp.placement(t, ctx, user)
	if p.Epoch != 1 {
		t.Fatalf("placement after the race: %+v; want one claim (epoch 1)", p)
	}
	owner := tp.a
	if p.Region == "b" {
		owner = tp.b
	}
	tp.owner(t, ctx, owner, user, 1)
	if jo, jx := tp.jobs(t, owner, user), tp.jobs(t, tp.other(owner), user); len(jo) != 1 || len(jx) != 0 {
		t.Fatalf("sandbox jobs: owner %s %v, other %v; want one", owner.name, jo, jx)
	}
	ok, owned := tp.starts(t, "ok")-ok0, tp.starts(t, "owned")-owned0
	t.Logf("%d connects: served in %s; starts ok %v, refused as owned elsewhere %v", n, owner.name, ok, owned)
	if ok != 1 || owned < 1 {
		t.Fatalf("%v sandbox starts for one user, want 1; %v refused as owned elsewhere, want at least one (the other region's)", ok, owned)
	}

	// A turn through the other region (forwarded) makes the owner snapshot; every commit in either bucket
	// is the owner's.
	s := dial(t, ctx, tp.client(t, tp.other(owner), user), nil)
	turnOK(t, ctx, s, "create race.txt containing one owner")
	stacktest.WaitFor(t, 30*time.Second, "the owner's snapshot", func() bool { return len(tp.manifests(t, owner, user)) > 0 })
	for _, m := range tp.manifests(t, owner, user) {
		if !strings.HasPrefix(m, "1-") {
			t.Fatalf("manifest %s in the owner's bucket: not epoch 1's", m)
		}
	}
	if ms := tp.manifests(t, tp.other(owner), user); len(ms) != 0 {
		t.Fatalf("manifests %v in region %s's bucket, which never owned %s", ms, tp.other(owner).name, user)
	}
}

// testFailover: a user whose sandbox runs in b connects through a's edge (forwarded to b) with Failover to
// b's; a's edge is killed while the turn streams; the SDK resumes through b and the reader sees the turn
// to its result with every message once and in order: seqs strictly increase, the only gap is b's
// handshake (ready and session_info, not delivered), and the deltas add up to the assistant's text.
func testFailover(t *testing.T, ctx context.Context, tp *topology) {
	const user = "dan"
	if _, err := tp.client(t, tp.b, user).Sandbox().List(ctx, "."); err != nil {
		t.Fatal(err)
	}
	p := tp.placement(t, ctx, user)
	if p.Region != "b" {
		t.Fatalf("placement %+v; want b", p)
	}
	events := make(chan warren.FailoverEvent, 16)
	c := tp.client(t, tp.a, user, warren.WithFailover(warren.Failover{
		Edges: []string{tp.b.relay.URL()}, MinBackoff: 10 * time.Millisecond,
		OnEvent: func(ev warren.FailoverEvent) { t.Logf("failover: %v", ev); events <- ev },
	}))
	s := dial(t, ctx, c, &warren.SessionOptions{IncludePartialMessages: true})
	if err := s.Send(ctx, modelserver.LongPrompt); err != nil {
		t.Fatal(err)
	}
	killedAt := stacktest.KilledTurn(t, ctx, s, 2, tp.a.edge.Kill)
	if s.Reconnects() != 1 || s.Edge() != tp.b.relay.URL() {
		t.Fatalf("reconnects %d, edge %s; want 1 through b (%s)", s.Reconnects(), s.Edge(), tp.b.relay.URL())
	}
	stacktest.LostAndReconnected(t, events, tp.a.relay.URL(), tp.b.relay.URL(), killedAt)
	// Still the one runner in b.
	if p2 := tp.placement(t, ctx, user); p2.Region != "b" || p2.Epoch != p.Epoch || p2.Alloc != p.Alloc {
		t.Fatalf("placement after the failover: %+v; was %+v", p2, p)
	}
	tp.owner(t, ctx, tp.b, user, p.Epoch)

	// a's edge comes back (the next case needs it), behind the same relay.
	tp.startEdge(t, tp.a)
	stacktest.WaitFor(t, 30*time.Second, "a's edge to serve again", func() bool {
		_, err := tp.client(t, tp.a, "probe").Regions(ctx)
		return err == nil
	})
}

// runnerPIDs are the pids of the `warren runner` processes serving user in region at epoch, found by their
// command lines (Nomad started them; the test owns the whole tree).
func runnerPIDs(t *testing.T, user, region string, epoch int64) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"-user", user}, {"-region", region}, {"-epoch", strconv.FormatInt(epoch, 10)}}
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "runner" {
			continue
		}
		match := true
		for _, w := range want {
			i := slices.Index(args, w[0])
			match = match && i >= 0 && i+1 < len(args) && args[i+1] == w[1]
		}
		if match {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// exited reports whether process pid has ended (gone, or a zombie not yet reaped).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "Z")
}

// testRegionDown: region a dies whole (Consul, Nomad, edge and scheduler killed; its runner frozen, as by
// a partition) while the user's sandbox runs there. Once the lease has lapsed the user resumes in b from
// a's last snapshot (a's S3 still answers). When a comes back (its Consul again, the runner thawed), the
// old runner writes nothing: no snapshot commit in either bucket, no ledger write; it stops by itself.
func testRegionDown(t *testing.T, ctx context.Context, tp *topology) {
	const user = "eve"
	sa := dial(t, ctx, tp.client(t, tp.a, user), nil)
	sid := sa.ID()
	turnOK(t, ctx, sa, "create keep.txt containing before the outage")
	p1 := tp.placement(t, ctx, user)
	if p1.Region != "a" || p1.Epoch != 1 {
		t.Fatalf("placement %+v; want a, epoch 1", p1)
	}
	stacktest.WaitFor(t, 30*time.Second, "the turn's snapshot in a's bucket", func() bool {
		m, ok := tp.latest(t, ctx, tp.a, user)
		return ok && m.Epoch == 1
	})
	pids := runnerPIDs(t, user, "a", 1)
	if len(pids) != 1 {
		t.Fatalf("runner processes of %s in a: %v, want one", user, pids)
	}
	old := pids[0]
	t.Cleanup(func() { _ = syscall.Kill(old, syscall.SIGKILL) })
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	lease := tp.placement(t, ctx, user).Lease // a lower bound: a's scheduler may renew it once more
	downAt := time.Now()
	tp.a.edge.Kill()
	tp.a.sched.Kill()
	tp.a.ns.Kill(t)
	tp.a.cs.Kill(t)
	_ = sa.Close()

	// Through b: refused (a holds the lease, and has no edge to forward to) until the lease lapses, then
	// claimed in b under epoch 2 and restored from a's snapshot.
	cb := tp.client(t, tp.b, user)
	var sb *warren.Session
	refusals := 0
	stacktest.WaitFor(t, startTimeout+leaseTTL+time.Minute, "the user to resume in b", func() bool {
		var err error
		if sb, err = cb.Dial(ctx, &warren.SessionOptions{SessionID: sid}); err != nil {
			if !warren.IsCode(err, warren.CodeUnavailable) {
				t.Fatalf("connect through b while a is down: %v; want unavailable until the lease lapses", err)
			}
			refusals++
			time.Sleep(500 * time.Millisecond)
			return false
		}
		return true
	})
	t.Cleanup(func() { _ = sb.Close() })
	if time.Now().Before(lease) {
		t.Fatalf("resumed in b before a's lease (until %s) lapsed", lease)
	}
	t.Logf("resumed in b %s after a went down (%d refusals meanwhile)", time.Since(downAt).Round(time.Millisecond), refusals)
	tp.resumedInB(t, ctx, cb, sb, user, "keep.txt", "before the outage")

	// a comes back: its Consul (empty, as after a loss) and the frozen runner.
	manifestsA, manifestsB := tp.manifests(t, tp.a, user), tp.manifests(t, tp.b, user)
	compute2 := "compute/" + registry.SandboxID(issuer, user) + "/2/"
	notB := func(ev []string) []string {
		return slices.DeleteFunc(ev, func(k string) bool { return strings.HasPrefix(k, compute2) })
	}
	events, ai, holds := tp.usage(t, ctx, user)
	events = notB(events)
	tp.a.cs.Start(t)
	if err := syscall.Kill(old, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stacktest.WaitFor(t, time.Minute, "a's old runner to stop by itself", func() bool { return exited(old) })
	// Its log (Nomad's, left on disk) says why: it found itself fenced (its lease lapsed, its owner lock
	// gone; whichever it notices first), and a final snapshot, if it tries one before its lock's loss stops
	// it, is refused by the newer epoch in b's bucket; the one commit it made is the one before the outage.
	logPath := filepath.Join(tp.a.ns.DataDir(), "data", "alloc", p1.Alloc, "alloc", "logs", "runner.stderr.0")
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("the old runner's log: %v", err)
	}
	log := string(b)
	if !strings.Contains(log, "runner fenced") || strings.Count(log, `"msg":"snapshot committed"`) != len(manifestsA) {
		t.Fatalf("the old runner's log does not show it fenced, with no commit after the outage:\n%s", stacktest.Tail(log, 4000))
	}
	t.Logf("the old runner's last words: %s", stacktest.Tail(log, 1500))
	if got := tp.manifests(t, tp.a, user); !slices.Equal(got, manifestsA) {
		t.Fatalf("a's bucket: manifests %v after the old runner came back, were %v", got, manifestsA)
	}
	if got := tp.manifests(t, tp.b, user); !slices.Equal(got, manifestsB) {
		t.Fatalf("b's bucket: manifests %v after the old runner came back, were %v", got, manifestsB)
	}
	if m, ok := tp.latest(t, ctx, tp.b, user); !ok || m.Epoch != 2 {
		t.Fatalf("b's latest %+v, %v; want epoch 2's", m, ok)
	}
	ev2, ai2, holds2 := tp.usage(t, ctx, user)
	if ev2 = notB(ev2); !slices.Equal(ev2, events) || ai2 != ai || holds2 != holds {
		t.Fatalf("the ledger changed after the old runner came back: events %v (were %v), %d µ$ (was %d), %d holds (were %d)",
			ev2, events, ai2, ai, holds2, holds)
	}
	if p := tp.placement(t, ctx, user); p.Region != "b" || p.Epoch != 2 {
		t.Fatalf("placement after a came back: %+v; want b, epoch 2", p)
	}
}
