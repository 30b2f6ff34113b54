package roles

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/spool"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/modelproxy"
)

// runnerKeyEnv carries the runner's bearer key from the scheduler's driver. It is removed from the
// process environment as soon as it is read so no child process can inherit it.
const runnerKeyEnv = "WARREN_RUNNER_KEY"

// modelKeyEnv carries the real model API key to the runner's model proxy; removed like the runner key.
const modelKeyEnv = "WARREN_MODEL_API_KEY"

func init() {
	register("runner", "run one user's sandbox (started by the scheduler)", runRunner)
}

// readyLine is the one JSON line printed on stdout once the runner listens; the driver reads it.
type readyLine struct {
	Event   string `json:"event"`
	Addr    string `json:"addr"`
	PID     int    `json:"pid"`
	Metrics string `json:"metrics,omitempty"`
}

func runRunner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg        runner.Config
		logLevel   slog.Level
		watchStdin bool
		metricsAt  string
	)
	fs.StringVar(&metricsAt, "metrics-listen", env.Or("WARREN_METRICS_LISTEN", ""), metricsListenUsage)
	fs.StringVar(&cfg.Issuer, "issuer", "", "issuer (project) id of the sandbox's user (required)")
	fs.StringVar(&cfg.User, "user", "", "end-user id (required)")
	fs.Int64Var(&cfg.Epoch, "epoch", 0, "placement epoch (fencing token)")
	fs.StringVar(&cfg.Region, "region", "", "this runner's region: reported to agent clients, and recorded in its snapshots when -snapshot-region names other regions")
	fs.StringVar(&cfg.Listen, "listen", runner.DefaultListen, "address of the internal API (keep it on loopback)")
	fs.StringVar(&cfg.Workspace, "workspace", "", "the user's workspace directory, created 0700 if missing (required)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "runner-private directory, never visible in the sandbox")
	fs.BoolVar(&cfg.Insecure, "insecure-no-sandbox", false, "run commands WITHOUT bubblewrap (development only)")
	fs.StringVar(&cfg.BwrapPath, "bwrap", "", "bubblewrap binary (default: bwrap in PATH)")
	fs.Func("sandbox-network", "veth (default; also \"own\": a network of the sandbox's own, kernel networking routed by the host; needs root), pasta (a network of its own through pasta, a user-mode stack: about 30 MiB more per sandbox; needs root) or host (share the runner's: development only)", func(v string) error {
		switch v {
		case "own", "veth":
			cfg.HostNetwork, cfg.NetworkStack = false, isolate.StackVeth
		case "pasta":
			cfg.HostNetwork, cfg.NetworkStack = false, isolate.StackPasta
		case "host":
			cfg.HostNetwork = true
		default:
			return fmt.Errorf("want veth, pasta or host, not %q", v)
		}
		return nil
	})
	fs.Func("sandbox-net-pool", "private IPv4 range (CIDR) the sandboxes' veth networks take their addresses from, a /31 each; the same for every runner of a host (default "+isolate.DefaultPool4.String()+")", func(v string) error {
		p, err := netip.ParsePrefix(v)
		cfg.NetPool4 = p
		return err
	})
	fs.Func("sandbox-net-pool6", "private IPv6 range (CIDR) the sandboxes' veth networks take their addresses from, a /127 each (default "+isolate.DefaultPool6.String()+")", func(v string) error {
		p, err := netip.ParsePrefix(v)
		cfg.NetPool6 = p
		return err
	})
	fs.BoolVar(&cfg.PreviewHostLoopback, "preview-host-loopback", false, "let preview URLs reach the host's loopback when the sandbox shares the host's network or runs without bubblewrap (development only; otherwise such a runner refuses previews)")
	fs.Func("egress-allow", "a destination (CIDR) the sandbox may reach although the default policy refuses it (private, link-local, loopback, the host's addresses); repeatable", func(v string) error {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return err
		}
		cfg.EgressAllow = append(cfg.EgressAllow, p)
		return nil
	})
	fs.StringVar(&cfg.CgroupParent, "cgroup-parent", "/warren", "control group under which each sandbox gets its own (\"-\": none; the task driver's limits alone hold)")
	fs.StringVar(&cfg.UIDDir, "sandbox-uid-dir", isolate.DefaultUIDDir, "host-wide directory of the locks on the sandboxes' host uids")
	fs.StringVar(&cfg.Pasta, "pasta", "pasta", "pasta binary (package passt), for -sandbox-network=pasta")
	fs.DurationVar(&cfg.DefaultExecTimeout, "exec-timeout", runner.DefaultExecTimeout, "timeout of a command that names none")
	fs.DurationVar(&cfg.MaxExecTimeout, "max-exec-timeout", runner.DefaultMaxExecTimeout, "largest timeout a command may ask for")
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.BoolVar(&watchStdin, "watch-stdin", false, "shut down when stdin reaches EOF (the parent holds the pipe)")
	var (
		claudeCLI, home, upstream, defaultModel, notice string
		ledgerPath, blobDir, snapPrefix                 string
		agentEnv                                        = map[string]string{}
	)
	fs.StringVar(&claudeCLI, "claude-cli", "", "path of the Claude Code CLI; enables the agent")
	fs.StringVar(&home, "home", "", "the agent's home directory (transcripts), required with -claude-cli")
	fs.StringVar(&upstream, "model-upstream", "https://api.anthropic.com", "model API the proxy forwards to; the key is read from $"+modelKeyEnv)
	fs.StringVar(&defaultModel, "default-model", "", "model used when neither client nor token names one")
	var allowFields, allowBetas multiFlag
	fs.Var(&allowFields, "model-allow-field", "top-level Messages API request field the model proxy forwards besides its known ones (repeatable; e.g. with -runner-arg on the scheduler); mcp_servers, speed, inference_geo and container cannot be allowed")
	fs.Var(&allowBetas, "model-allow-beta", "anthropic-beta value the model proxy forwards besides the pinned CLI's (repeatable); enable only betas billed as tokens that reach nothing on the caller's behalf")
	fs.StringVar(&notice, "model-notice", "", "notice shown to clients in control ready (e.g. a demo model answers)")
	fs.Func("agent-env", "K=V added to the agent's environment (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want K=V, got %q", v)
		}
		agentEnv[k] = val
		return nil
	})
	fs.StringVar(&ledgerPath, "ledger-sqlite", "", "SQLite ledger file (warren dev) the model proxy reserves budget in")
	fs.StringVar(&blobDir, "blob-dir", "", "directory blob store for snapshots (warren dev)")
	fs.StringVar(&snapPrefix, "snapshot-prefix", "", "key prefix of this sandbox's snapshots")
	snapRegions := snapshotRegions{}
	fs.Var(snapRegions, "snapshot-region", snapshotRegionUsage)
	fs.StringVar(&cfg.Template, "template", "", "workspace template a new sandbox starts from (default \"default\"; \"-\": none); see warren deploy")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "sleep (snapshot and exit) after this long idle; 0 never")
	fs.DurationVar(&cfg.ProcessKeepAwake, "process-keep-awake", runner.DefaultProcessKeepAwake, "the cap on process time: a running background process keeps an otherwise idle sandbox awake until the last request is this old (then the sandbox sleeps and its processes end); negative: processes never keep it awake")
	fs.IntVar(&cfg.MaxProcesses, "max-processes", runner.DefaultMaxProcesses, "background processes a sandbox may run at once (as many exited ones are kept for listing)")
	fs.Int64Var(&cfg.ProcessLogBytes, "process-log-bytes", runner.DefaultProcessLogBytes, "output kept of each background process (the oldest is dropped first)")
	var (
		prod  prodFlags
		alloc string
	)
	prod.registerConsul(fs)
	prod.registerDB(fs)
	prod.registerS3(fs)
	var warm bool
	fs.BoolVar(&warm, "warm", false, "warm-pool runner: start without a user, announce in Consul, wait for a scheduler's assignment (needs -consul)")
	fs.StringVar(&alloc, "alloc", os.Getenv("NOMAD_ALLOC_ID"), "this sandbox's allocation id, recorded in the registry ($NOMAD_ALLOC_ID)")
	var webhookSecretFile string
	fs.IntVar(&cfg.Tasks.MaxActive, "max-tasks", runner.DefaultMaxActiveTasks, "one-shot tasks a user may have queued or running at once")
	fs.IntVar(&cfg.Tasks.Concurrency, "task-concurrency", 1, "one-shot tasks of a user that run at once (the others wait)")
	fs.StringVar(&webhookSecretFile, "webhook-secret-file", "", "file holding the operator's secret that task webhooks are signed with (per issuer, derived); unset: webhooks are refused")
	fs.BoolVar(&cfg.Tasks.WebhookAllowPrivate, "webhook-allow-private", false, "let task webhooks use http and reach loopback and private addresses (development only)")
	var grace int64
	fs.Int64Var(&grace, "grace-microdollars", modelproxy.DefaultGrace, "what a session may spend while the ledger is unreachable (spooled); 0 disables")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: warren runner [flags]\n\nThe bearer key is read from $%s (required without -consul; with -consul the runner makes its own\nand publishes it in its Consul registration).\n\nflags:\n", runnerKeyEnv)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	cfg.Key = os.Getenv(runnerKeyEnv)
	if err := os.Unsetenv(runnerKeyEnv); err != nil {
		return fmt.Errorf("unset %s: %w", runnerKeyEnv, err)
	}
	modelKey := os.Getenv(modelKeyEnv)
	if err := os.Unsetenv(modelKeyEnv); err != nil {
		return fmt.Errorf("unset %s: %w", modelKeyEnv, err)
	}
	if cfg.Key == "" && prod.consulAddr != "" {
		// A self-registering runner makes its own key; the edge reads it from the registry.
		cfg.Key = rand.Text()
	}
	if warm {
		if prod.consulAddr == "" {
			return errors.New("-warm needs -consul: warm runners are found and claimed through Consul")
		}
		wlog := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: logLevel})).With("role", "runner", "alloc", alloc)
		a, addr, err := awaitAssignment(ctx, cfg.Listen, cfg.Key, alloc, cfg.Region, &prod, wlog)
		if err != nil {
			return err
		}
		cfg.Issuer, cfg.User, cfg.Epoch, cfg.Listen = a.Issuer, a.User, a.Epoch, addr
		snapPrefix = "" // the job's was a placeholder's: derived from the assigned user below
		if a.Region != "" {
			cfg.Region = a.Region
		}
		if a.Template != "" {
			cfg.Template = a.Template
		}
	}
	if claudeCLI != "" {
		ledger, closeLedger, err := openRunnerLedger(ctx, ledgerPath, &prod)
		if err != nil {
			return err
		}
		defer closeLedger()
		// Usage the ledger cannot take now is spooled on the runner's own disk and replayed; sessions
		// carry on within a grace allowance meanwhile (docs/ARCHITECTURE.md#grace).
		spoolDir := cfg.StateDir
		if spoolDir == "" {
			spoolDir = cfg.Workspace + ".state"
		}
		if err := os.MkdirAll(spoolDir, 0o700); err != nil {
			return fmt.Errorf("usage spool: %w", err)
		}
		sp, err := spool.Open(filepath.Join(spoolDir, "usage.spool"), ledger, spool.Options{})
		if err != nil {
			return fmt.Errorf("usage spool: %w", err)
		}
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = sp.Flush(fctx) // what stays is replayed by the next runner of this sandbox
			_ = sp.Close()
		}()
		// Prices set through the billing API override the built-in table (read at start).
		prices, err := billing.EffectivePrices(ctx, ledger)
		if err != nil {
			return fmt.Errorf("prices: %w", err)
		}
		cfg.Model = &runner.ModelConfig{
			CLIPath: claudeCLI, Home: home, Upstream: upstream, APIKey: modelKey, Reserver: sp,
			Env: agentEnv, DefaultModel: defaultModel, Notice: notice, Grace: grace, Prices: prices,
			AllowFields: allowFields, AllowBetas: allowBetas,
		}
	}
	switch {
	case blobDir != "" && prod.s3Bucket != "":
		return errors.New("-blob-dir and -s3-bucket exclude each other")
	case blobDir != "":
		store, err := blobfs.New(blobDir)
		if err != nil {
			return fmt.Errorf("blob store: %w", err)
		}
		cfg.Snapshots, cfg.SnapshotPrefix = store, snapPrefix
	case prod.s3Bucket != "":
		store, err := prod.openS3(ctx)
		if err != nil {
			return fmt.Errorf("blob store: %w", err)
		}
		if snapPrefix == "" {
			snapPrefix = "sandboxes/" + registry.SandboxID(cfg.Issuer, cfg.User)
		}
		cfg.Snapshots, cfg.SnapshotPrefix = store, snapPrefix
	}
	if len(snapRegions) > 0 {
		if cfg.Snapshots == nil || cfg.Region == "" {
			return errors.New("-snapshot-region needs this runner's -region and its snapshot store (-s3-bucket or -blob-dir)")
		}
		stores, err := snapRegions.open(ctx, cfg.Region, &prod)
		if err != nil {
			return err
		}
		cfg.SnapshotRegions = stores
	}
	if cfg.Key == "" {
		return fmt.Errorf("%s is not set: the runner needs its bearer key", runnerKeyEnv)
	}
	if webhookSecretFile != "" {
		master, err := runner.ReadWebhookMaster(webhookSecretFile)
		if err != nil {
			return err
		}
		cfg.Tasks.WebhookSecret = master
	}
	// Unsetenv only edits Go's copy: the kernel still shows the original environment, key included, in
	// /proc/<pid>/environ. Non-dumpable makes that file (and ptrace) unavailable to other processes of
	// this uid, such as commands run with -insecure-no-sandbox. Sandboxed commands cannot see this
	// process at all (own PID namespace).
	dumpErr := setNonDumpable()

	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: logLevel})).With(
		"role", "runner", "issuer", cfg.Issuer, "user", cfg.User, "epoch", cfg.Epoch)
	if dumpErr != nil {
		cfg.Logger.Warn("could not make the runner non-dumpable; its environment stays readable by this uid", "err", dumpErr)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var release func()
	if prod.consulAddr != "" {
		// docs/ARCHITECTURE.md#owner-lock: the runner holds its user's owner lock in Consul before it restores or serves
		// anything, so an older epoch still shutting down is fenced (its lock lost, its final snapshot
		// skipped) before this one reads the latest snapshot. Requests that arrive meanwhile wait in the
		// listen backlog. Losing the lock later (session invalidated, a newer epoch took over, Consul
		// unreachable past the TTL) stops the agent without a final snapshot and ends the process.
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", cfg.Listen, err)
		}
		cfg.Listener, cfg.Listen = ln, ln.Addr().String()
		var lost <-chan struct{}
		lost, release, err = holdOwnerLock(ctx, &prod, registry.Entry{
			Issuer: cfg.Issuer, User: cfg.User, Epoch: cfg.Epoch, Region: cfg.Region, Alloc: alloc,
			Addr: ln.Addr().String(), Key: cfg.Key, Since: time.Now(),
		}, cfg.Logger)
		if err != nil {
			ln.Close()
			return err
		}
		defer release()
		go func() {
			select {
			case <-lost:
				cfg.Logger.Error("owner lock lost: fencing myself (stopping the agent and exiting, no final snapshot)")
				cancel(runner.ErrFencedOff)
			case <-ctx.Done():
			}
		}()
	}
	r, err := runner.New(cfg)
	if err != nil {
		return err
	}
	metricsAddr, metricsDone, err := serveMetrics(ctx, metricsAt, r.Metrics(), cfg.Logger)
	if err != nil {
		return err
	}
	defer func() { cancel(nil); metricsDone() }()
	if watchStdin {
		// This goroutine is not waited for: a blocking read of stdin cannot be interrupted, and it ends
		// with the process.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cfg.Logger.Info("stdin closed; shutting down")
			cancel(nil)
		}()
	}

	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-errc:
		if err == nil {
			err = errors.New("runner stopped before listening")
		}
		if errors.Is(context.Cause(ctx), runner.ErrFencedOff) {
			err = errors.Join(err, errFenced)
		}
		return err
	}
	if err := json.NewEncoder(stdout).Encode(readyLine{Event: "ready", Addr: r.Addr(), PID: os.Getpid(), Metrics: metricsAddr}); err != nil {
		cancel(nil)
		<-errc
		return fmt.Errorf("write ready line: %w", err)
	}
	start := time.Now()
	err = <-errc
	if errors.Is(context.Cause(ctx), runner.ErrFencedOff) {
		err = errors.Join(err, errFenced)
	}
	cfg.Logger.Info("runner exited", "uptime_s", int64(time.Since(start).Seconds()), "err", err)
	return err
}

func setNonDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}
