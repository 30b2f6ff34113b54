package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/cmd/warren/internal/roles"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/tools"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("bench", "load tool: start latency of new sandboxes, exec round trips, idle runner RSS, idle users per GiB", runBench)
}

// runBench starts the whole dev platform in-process on a free port in a temporary data dir and measures it
// from the outside through the SDK, as a user would.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren bench [flags]\n\nStarts a dev stack and measures connects, execs and (with -turns) agent turns.")
	users := fs.Int("users", 50, "new users to connect (each starts a sandbox)")
	conc := fs.Int("concurrency", 1, "connects in flight at once")
	execs := fs.Int("execs", 200, "exec round trips per path (edge, direct)")
	insecure := fs.Bool("insecure-no-sandbox", false, "measure without bubblewrap")
	keep := fs.Bool("keep", false, "keep the temporary data dir")
	turns := fs.Int("turns", 0, "also measure agent turns (real Claude Code CLI, scripted model): prompt → first agent event and → result")
	agent := fs.Bool("agent", false, "run the agent (real Claude Code CLI) without measuring turns: connect → ready with no model, an alias and a full name (implied by -turns)")
	firstEvents := fs.Int("first-events", 0, "also measure the first agent event of this many pairs of new sessions (real Claude Code CLI, scripted model): a prompt to a session open for 1 s, one sent with the init, and the CLI alone as the floor; then an idle user's memory once its agent is released")
	openFor := fs.Duration("open-for", time.Second, "with -first-events: how long a session is open before its prompt")
	agentIdle := fs.Duration("agent-idle", runner.DefaultAgentIdle, "runners stop a session's agent process this long after its last client left")
	density := fs.String("density", "", "also bring idle users (sandbox up, no client, no turn) up to each of these counts, e.g. 10,100,1000, and print their memory and users per GiB")
	conns := fs.Int("conns", 0, "only hold this many idle agent channels on the edge (dialed by a child process, -concurrency at once) and print what each costs the edge: memory, goroutines, fds, idle CPU, connect p99")
	connsUsers := fs.Int("conns-users", 20, "with -conns: the users (sandboxes) the channels are spread over")
	connsIdle := fs.Duration("conns-idle", time.Minute, "with -conns: how long the channels idle while the edge's CPU is measured (a lease renewal period is 20s)")
	connsProfile := fs.String("conns-profile", "", "with -conns: write the edge process's heap profile, taken with the channels open, to this file, and its CPU profile while they idle to this file + .cpu")
	dialer := fs.Bool("conns-dialer", false, "internal: the dialing child of -conns")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dialer {
		return runConnsDialer(ctx, os.Stdin, stdout)
	}
	nofile := ""
	if *conns > 0 {
		// the edge's two fds per channel, the runners' (children inherit the limit), and some to spare
		nofile = raiseNoFile(uint64(3**conns) + 4096)
	}
	levels, err := parseLevels(*density)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "warren-bench-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	cli := ""
	if *turns > 0 || *agent || *firstEvents > 0 {
		if cli = tools.FindClaudeCLI(); cli == "" {
			return errors.New("-turns, -first-events and -agent need the Claude Code CLI: run `make tools`")
		}
	}
	cfg := devstack.Config{DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0", Insecure: *insecure, ClaudeCLI: cli, AgentIdle: *agentIdle}
	if *conns > 0 { // the connect rates would refuse most channels
		cfg.Rates = edge.Rates{ConnectsPerUser: -1, ConnectsPerIssuer: -1, PromptsPerUser: -1, PromptsPerIssuer: -1}
		cfg.NoWebTransport = true
	}
	st, err := devstack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	mint := func(user string) (string, error) {
		return token.Mint(st.DevKey, token.Claims{Issuer: devstack.DevIssuer, Subject: user, ExpiresAt: time.Now().Add(time.Hour)})
	}
	if *conns > 0 {
		return benchConns(ctx, stdout, st, mint, *conns, *connsUsers, *conc, *connsIdle, nofile, *connsProfile)
	}
	fmt.Fprintf(stdout, "warren bench: %d new users (concurrency %d), %d execs per path, isolation=%s, agent=%t\n\n",
		*users, *conc, *execs, roles.IsolationLabel(*insecure), cli != "")

	// 1. new-user connect → ready
	if err := benchConnect(ctx, stdout, st, mint, *users, *conc, *insecure, cli != ""); err != nil {
		return err
	}

	// 2. exec round trip: through the edge vs directly against the runner
	tok, _ := mint("bench-user-0")
	c, err := warren.New(st.URL(), tok)
	if err != nil {
		return err
	}
	sb := c.Sandbox()
	req := wire.ExecRequest{Command: "true", Args: []string{}}
	edgeLat := make([]time.Duration, 0, *execs)
	for range *execs {
		t0 := time.Now()
		if _, err := sb.Exec(ctx, req); err != nil {
			return fmt.Errorf("exec through edge: %w", err)
		}
		edgeLat = append(edgeLat, time.Since(t0))
	}
	entry, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "bench-user-0")
	if err != nil {
		return err
	}
	direct := make([]time.Duration, 0, *execs)
	hc := &http.Client{}
	body, _ := json.Marshal(req)
	for range *execs {
		t0 := time.Now()
		if err := execDirect(ctx, hc, entry, body); err != nil {
			return fmt.Errorf("exec direct: %w", err)
		}
		direct = append(direct, time.Since(t0))
	}
	report(stdout, "exec `true` through the edge", edgeLat)
	report(stdout, "exec `true` directly against the runner", direct)

	// 3. RSS of an idle runner
	rss, err := rssKiB(entry.Alloc)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-44s %d KiB (pid %s)\n", "idle runner RSS", rss, entry.Alloc)
	if err := benchDensity(ctx, stdout, st, mint, levels, *conc); err != nil {
		return err
	}
	if *turns > 0 {
		if err := benchTurns(ctx, stdout, c, *turns); err != nil {
			return err
		}
	}
	if *firstEvents > 0 {
		return benchFirstEvent(ctx, stdout, st, mint, cli, *firstEvents, *openFor)
	}
	return nil
}

// connectModel is what the init of a new user names as its model, and its name in the report.
type connectModel struct{ name, model string }

// connectModels are the inits of new users when the agent runs: no model (the CLI's default), an alias and
// a full name. Each is resolved before ready (docs/PROTOCOL.md#server-messages).
var connectModels = []connectModel{{"no model", ""}, {"alias sonnet", "sonnet"}, {"full model name", "claude-sonnet-4-5"}}

// benchConnect measures new-user connect → ready. With the agent, the users take turns naming each of
// connectModels, so they share the machine's load; the floor, one start of the cheapest sandboxed process,
// is measured beside each connect, and each p50 is also given as a multiple of the floor's.
func benchConnect(ctx context.Context, stdout io.Writer, st *devstack.Stack, mint func(string) (string, error), users, conc int, insecure, agent bool) error {
	models := []connectModel{{"sandbox start", ""}}
	if agent {
		models = connectModels
	}
	lat := make([][]time.Duration, len(models))
	floor := make([]time.Duration, 0, users)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, conc))
	errs := make(chan error, users)
	for i := range users {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m := i % len(models)
			d, err := connectOnce(ctx, st, mint, fmt.Sprintf("bench-user-%d", i), models[m].model)
			if err != nil {
				errs <- fmt.Errorf("user %d: %w", i, err)
				return
			}
			f, err := floorOnce(ctx, insecure)
			if err != nil {
				errs <- fmt.Errorf("floor: %w", err)
				return
			}
			mu.Lock()
			lat[m], floor = append(lat[m], d), append(floor, f)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	floorName := "floor: bwrap --unshare-all /bin/true"
	if insecure {
		floorName = "floor: /bin/true"
	}
	report(stdout, floorName, floor)
	for m, cm := range models {
		report(stdout, "connect → ready (new user, "+cm.name+")", lat[m])
	}
	ratios := make([]string, len(models))
	for m, cm := range models {
		ratios[m] = fmt.Sprintf("%s %.1f×", cm.name, float64(p50(lat[m]))/float64(max(p50(floor), 1)))
	}
	fmt.Fprintf(stdout, "%-44s %s\n", "connect → ready p50 ÷ floor p50", strings.Join(ratios, ", "))
	return nil
}

// connectOnce connects a new user whose init names model and returns the time to ready.
func connectOnce(ctx context.Context, st *devstack.Stack, mint func(string) (string, error), user, model string) (time.Duration, error) {
	tok, err := mint(user)
	if err != nil {
		return 0, err
	}
	c, err := warren.New(st.URL(), tok)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	s, err := c.Dial(ctx, &wire.SessionOptions{Model: model})
	if err != nil {
		return 0, err
	}
	d := time.Since(t0)
	_ = s.Close()
	return d, nil
}

// floorOnce times one start of the cheapest sandboxed process: bubblewrap in its own namespaces around
// /bin/true (without the sandbox, /bin/true alone).
func floorOnce(ctx context.Context, insecure bool) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "/bin/true")
	if insecure {
		cmd = exec.CommandContext(ctx, "/bin/true")
	}
	t0 := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%v: %w: %s", cmd.Args, err, out)
	}
	return time.Since(t0), nil
}

// p50 is the median of d, as report gives it.
func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return quantile(s, 0.5)
}

// quantile is the p quantile of sorted s.
func quantile(s []time.Duration, p float64) time.Duration {
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// benchTurns measures agent turns on one session: the first turn starts the CLI process, later ones reuse it.
func benchTurns(ctx context.Context, stdout io.Writer, c *warren.Client, n int) error {
	s, err := c.Dial(ctx, &wire.SessionOptions{})
	if err != nil {
		return err
	}
	defer s.Close()
	var first, whole []time.Duration
	for i := range n {
		t0 := time.Now()
		var ttfe time.Duration
		for ev, err := range s.Prompt(ctx, fmt.Sprintf("say something %d", i)) {
			if err != nil {
				return fmt.Errorf("turn %d: %w", i, err)
			}
			if ttfe == 0 && ev.Type != wire.TypeControl {
				ttfe = time.Since(t0)
			}
			if r, ok := ev.Result(); ok && r.IsError {
				return fmt.Errorf("turn %d failed: %s", i, r.Result)
			}
		}
		if i == 0 {
			fmt.Fprintf(stdout, "%-44s first=%s whole=%s\n", "agent turn 1 (starts the CLI process)", ttfe.Round(10*time.Microsecond), time.Since(t0).Round(10*time.Microsecond))
			continue
		}
		first, whole = append(first, ttfe), append(whole, time.Since(t0))
	}
	if len(first) > 0 {
		report(stdout, "agent turn: prompt → first agent event", first)
		report(stdout, "agent turn: prompt → result", whole)
	}
	return nil
}

func execDirect(ctx context.Context, hc *http.Client, e registry.Entry, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.Addr+"/v1/sandbox/exec", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return wire.ReadHTTPError(resp.StatusCode, b)
	}
	return nil
}

func report(w io.Writer, name string, d []time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) time.Duration { return quantile(s, p) }
	fmt.Fprintf(w, "%-44s n=%-4d p50=%-9s p95=%-9s p99=%-9s max=%s\n", name, len(s),
		q(0.50).Round(10*time.Microsecond), q(0.95).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), s[len(s)-1].Round(10*time.Microsecond))
}

func rssKiB(pid string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %s", pid)
}
