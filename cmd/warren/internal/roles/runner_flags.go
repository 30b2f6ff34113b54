package roles

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
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

// runnerFlags are warren runner's flags: those that map onto runner.Config directly are read into cfg,
// the rest (the agent's, the stores', the process's) beside it.
type runnerFlags struct {
	cfg               runner.Config
	logLevel          slog.Level
	watchStdin        bool
	metricsAt         string
	model             modelFlags
	blobDir           string
	snapPrefix        string
	snapRegions       snapshotRegions
	prod              prodFlags
	warm              bool
	alloc             string
	webhookSecretFile string
}

func newRunnerFlags() *runnerFlags {
	return &runnerFlags{snapRegions: snapshotRegions{}, model: modelFlags{agentEnv: map[string]string{}}}
}

// register defines every flag of warren runner on fs.
func (f *runnerFlags) register(fs *flag.FlagSet) {
	f.registerSandbox(fs)
	f.registerNetwork(fs)
	f.model.register(fs)
	f.registerStores(fs)
	f.registerLimits(fs)
	fs.StringVar(&f.metricsAt, "metrics-listen", env.Or("WARREN_METRICS_LISTEN", ""), metricsListenUsage)
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.BoolVar(&f.watchStdin, "watch-stdin", false, "shut down when stdin reaches EOF (the parent holds the pipe)")
	f.prod.registerConsul(fs)
	fs.BoolVar(&f.warm, "warm", false, "warm-pool runner: start without a user, announce in Consul, wait for a scheduler's assignment (needs -consul)")
	fs.StringVar(&f.alloc, "alloc", os.Getenv("NOMAD_ALLOC_ID"), "this sandbox's allocation id, recorded in the registry ($NOMAD_ALLOC_ID)")
	fs.StringVar(&f.webhookSecretFile, "webhook-secret-file", "", "file holding the operator's secret that task webhooks are signed with (per issuer, derived); unset: webhooks are refused")
	fs.BoolVar(&f.cfg.Tasks.WebhookAllowPrivate, "webhook-allow-private", false, "let task webhooks use http and reach loopback and private addresses (development only)")
}

// registerSandbox defines who the sandbox is for and how it is isolated.
func (f *runnerFlags) registerSandbox(fs *flag.FlagSet) {
	cfg := &f.cfg
	fs.StringVar(&cfg.Issuer, "issuer", "", "issuer (project) id of the sandbox's user (required)")
	fs.StringVar(&cfg.User, "user", "", "end-user id (required)")
	fs.Int64Var(&cfg.Epoch, "epoch", 0, "placement epoch (fencing token)")
	fs.StringVar(&cfg.Region, "region", "", "this runner's region: reported to agent clients, and recorded in its snapshots when -snapshot-region names other regions")
	fs.StringVar(&cfg.Listen, "listen", runner.DefaultListen, "address of the internal API (keep it on loopback)")
	fs.StringVar(&cfg.Workspace, "workspace", "", "the user's workspace directory, created 0700 if missing (required)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "runner-private directory, never visible in the sandbox")
	fs.BoolVar(&cfg.Insecure, "insecure-no-sandbox", false, "run commands WITHOUT bubblewrap (development only)")
	fs.StringVar(&cfg.BwrapPath, "bwrap", "", "bubblewrap binary (default: bwrap in PATH)")
	fs.StringVar(&cfg.CgroupParent, "cgroup-parent", "/warren", "control group under which each sandbox gets its own (\"-\": none; the task driver's limits alone hold)")
	fs.StringVar(&cfg.UIDDir, "sandbox-uid-dir", isolate.DefaultUIDDir, "host-wide directory of the locks on the sandboxes' host uids")
	fs.StringVar(&cfg.Template, "template", "", "workspace template a new sandbox starts from (default \"default\"; \"-\": none); see warren deploy")
}

// registerNetwork defines the sandbox's network and what it may reach.
func (f *runnerFlags) registerNetwork(fs *flag.FlagSet) {
	cfg := &f.cfg
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
	fs.StringVar(&cfg.Pasta, "pasta", "pasta", "pasta binary (package passt), for -sandbox-network=pasta")
}

// registerStores defines where snapshots go and where the ledger is.
func (f *runnerFlags) registerStores(fs *flag.FlagSet) {
	fs.StringVar(&f.model.ledgerPath, "ledger-sqlite", "", "SQLite ledger file (warren dev) the model proxy reserves budget in")
	fs.StringVar(&f.blobDir, "blob-dir", "", "directory blob store for snapshots (warren dev)")
	fs.StringVar(&f.snapPrefix, "snapshot-prefix", "", "key prefix of this sandbox's snapshots")
	fs.Var(f.snapRegions, "snapshot-region", snapshotRegionUsage)
	f.prod.registerDB(fs)
	f.prod.registerS3(fs)
}

// registerLimits defines the timeouts and the per-sandbox limits.
func (f *runnerFlags) registerLimits(fs *flag.FlagSet) {
	cfg := &f.cfg
	fs.DurationVar(&cfg.DefaultExecTimeout, "exec-timeout", runner.DefaultExecTimeout, "timeout of a command that names none")
	fs.DurationVar(&cfg.MaxExecTimeout, "max-exec-timeout", runner.DefaultMaxExecTimeout, "largest timeout a command may ask for")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "sleep (snapshot and exit) after this long idle; 0 never")
	fs.DurationVar(&cfg.AgentIdle, "agent-idle", runner.DefaultAgentIdle, "stop a session's agent process this long after its last client left, when no turn runs (a client coming back starts it again)")
	fs.DurationVar(&cfg.ProcessKeepAwake, "process-keep-awake", runner.DefaultProcessKeepAwake, "the cap on process time: a running background process keeps an otherwise idle sandbox awake until the last request is this old (then the sandbox sleeps and its processes end); negative: processes never keep it awake")
	fs.IntVar(&cfg.MaxProcesses, "max-processes", runner.DefaultMaxProcesses, "background processes a sandbox may run at once (as many exited ones are kept for listing)")
	fs.Int64Var(&cfg.ProcessLogBytes, "process-log-bytes", runner.DefaultProcessLogBytes, "output kept of each background process (the oldest is dropped first)")
	fs.IntVar(&cfg.Tasks.MaxActive, "max-tasks", runner.DefaultMaxActiveTasks, "one-shot tasks a user may have queued or running at once")
	fs.IntVar(&cfg.Tasks.Concurrency, "task-concurrency", 1, "one-shot tasks of a user that run at once (the others wait)")
}

// readKeys takes the runner's bearer key and the model API key out of the environment (so no child
// process inherits them) and returns the model key; a self-registering runner without a key makes one.
func (f *runnerFlags) readKeys() (modelKey string, err error) {
	f.cfg.Key = os.Getenv(runnerKeyEnv)
	if err := os.Unsetenv(runnerKeyEnv); err != nil {
		return "", fmt.Errorf("unset %s: %w", runnerKeyEnv, err)
	}
	modelKey = os.Getenv(modelKeyEnv)
	if err := os.Unsetenv(modelKeyEnv); err != nil {
		return "", fmt.Errorf("unset %s: %w", modelKeyEnv, err)
	}
	if f.cfg.Key == "" && f.prod.consulAddr != "" {
		// A self-registering runner makes its own key; the edge reads it from the registry.
		f.cfg.Key = rand.Text()
	}
	return modelKey, nil
}

// config is the runner's configuration from the flags: the model proxy's ledger and spool opened, the
// snapshot stores, the webhook secret. cl closes what was opened, in reverse; on an error it is closed
// already.
func (f *runnerFlags) config(ctx context.Context, modelKey string) (cfg runner.Config, cl closers, err error) {
	defer func() {
		if err != nil {
			cl.close()
			cl = nil
		}
	}()
	cfg = f.cfg
	if f.model.claudeCLI != "" {
		if cfg.Model, err = f.model.config(ctx, &f.prod, f.spoolDir(), modelKey, &cl); err != nil {
			return cfg, cl, err
		}
	}
	if err := f.snapshots(ctx, &cfg); err != nil {
		return cfg, cl, err
	}
	if cfg.Key == "" {
		return cfg, cl, fmt.Errorf("%s is not set: the runner needs its bearer key", runnerKeyEnv)
	}
	if f.webhookSecretFile != "" {
		master, err := runner.ReadWebhookMaster(f.webhookSecretFile)
		if err != nil {
			return cfg, cl, err
		}
		cfg.Tasks.WebhookSecret = master
	}
	return cfg, cl, nil
}

// spoolDir is where the usage spool lives: the state dir, else beside the workspace.
func (f *runnerFlags) spoolDir() string {
	if f.cfg.StateDir != "" {
		return f.cfg.StateDir
	}
	return f.cfg.Workspace + ".state"
}

// snapshots sets cfg's snapshot store (-blob-dir or -s3-bucket) and the other regions' (-snapshot-region).
func (f *runnerFlags) snapshots(ctx context.Context, cfg *runner.Config) error {
	switch {
	case f.blobDir != "" && f.prod.s3Bucket != "":
		return errors.New("-blob-dir and -s3-bucket exclude each other")
	case f.blobDir != "":
		store, err := blobfs.New(f.blobDir)
		if err != nil {
			return fmt.Errorf("blob store: %w", err)
		}
		cfg.Snapshots, cfg.SnapshotPrefix = store, f.snapPrefix
	case f.prod.s3Bucket != "":
		store, err := f.prod.openS3(ctx)
		if err != nil {
			return fmt.Errorf("blob store: %w", err)
		}
		cfg.Snapshots, cfg.SnapshotPrefix = store, f.snapPrefix
		if cfg.SnapshotPrefix == "" {
			cfg.SnapshotPrefix = "sandboxes/" + registry.SandboxID(cfg.Issuer, cfg.User)
		}
	}
	if len(f.snapRegions) == 0 {
		return nil
	}
	if cfg.Snapshots == nil || cfg.Region == "" {
		return errors.New("-snapshot-region needs this runner's -region and its snapshot store (-s3-bucket or -blob-dir)")
	}
	stores, err := f.snapRegions.open(ctx, cfg.Region, &f.prod)
	if err != nil {
		return err
	}
	cfg.SnapshotRegions = stores
	return nil
}

// modelFlags are the runner's agent and model proxy flags.
type modelFlags struct {
	claudeCLI, home, upstream, defaultModel, notice string
	ledgerPath                                      string
	allowFields, allowBetas                         multiFlag
	agentEnv                                        map[string]string
	grace                                           int64
	demoPrice                                       float64
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.claudeCLI, "claude-cli", "", "path of the Claude Code CLI; enables the agent")
	fs.StringVar(&m.home, "home", "", "the agent's home directory (transcripts), required with -claude-cli")
	fs.StringVar(&m.upstream, "model-upstream", "https://api.anthropic.com", "model API the proxy forwards to; the key is read from $"+modelKeyEnv)
	fs.StringVar(&m.defaultModel, "default-model", "", "model used when neither client nor token names one")
	fs.Var(&m.allowFields, "model-allow-field", "top-level Messages API request field the model proxy forwards besides its known ones (repeatable; e.g. with -runner-arg on the scheduler); mcp_servers, speed, inference_geo and container cannot be allowed")
	fs.Var(&m.allowBetas, "model-allow-beta", "anthropic-beta value the model proxy forwards besides the pinned CLI's (repeatable); enable only betas billed as tokens that reach nothing on the caller's behalf")
	fs.StringVar(&m.notice, "model-notice", "", "notice shown to clients in control ready (e.g. a demo model answers)")
	fs.Float64Var(&m.demoPrice, "model-demo-price", 0, "price every model at this many `USD` per million tokens of any kind instead of the price table (warren dev sets it when its scripted model answers; never written to the ledger)")
	fs.Func("agent-env", "K=V added to the agent's environment (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want K=V, got %q", v)
		}
		m.agentEnv[k] = val
		return nil
	})
	fs.Int64Var(&m.grace, "grace-microdollars", modelproxy.DefaultGrace, "what a session may spend while the ledger is unreachable (spooled); 0 disables")
}

// config opens the ledger the model proxy meters through, with the usage spool in spoolDir before it, and
// returns the agent's configuration; cl gets what to close.
func (m *modelFlags) config(ctx context.Context, prod *prodFlags, spoolDir, apiKey string, cl *closers) (*runner.ModelConfig, error) {
	ledger, closeLedger, err := openRunnerLedger(ctx, m.ledgerPath, prod)
	if err != nil {
		return nil, err
	}
	cl.add(closeLedger)
	// Usage the ledger cannot take now is spooled on the runner's own disk and replayed; sessions carry on
	// within a grace allowance meanwhile (docs/ARCHITECTURE.md#grace).
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	sp, err := spool.Open(filepath.Join(spoolDir, "usage.spool"), ledger, spool.Options{})
	if err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	cl.add(func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sp.Flush(fctx) // what stays is replayed by the next runner of this sandbox
		_ = sp.Close()
	})
	// Prices set through the billing API override the built-in table (read at start).
	prices, err := billing.EffectivePrices(ctx, ledger)
	if err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	if m.demoPrice < 0 || math.IsNaN(m.demoPrice) || math.IsInf(m.demoPrice, 0) {
		return nil, fmt.Errorf("-model-demo-price %v: want a price in USD, not negative", m.demoPrice)
	}
	if m.demoPrice > 0 {
		mu := int64(math.Round(m.demoPrice * 1e6)) // microdollars per million tokens
		prices = billing.Prices{Default: billing.Price{Input: mu, Output: mu, CacheRead: mu, CacheCreation: mu}}
	}
	return &runner.ModelConfig{
		CLIPath: m.claudeCLI, Home: m.home, Upstream: m.upstream, APIKey: apiKey, Reserver: sp,
		Env: m.agentEnv, DefaultModel: m.defaultModel, Notice: m.notice, Grace: m.grace, Prices: prices,
		AllowFields: m.allowFields, AllowBetas: m.allowBetas,
	}, nil
}

// closers are cleanups run in reverse order of their adding, as defers would.
type closers []func()

func (c *closers) add(f func()) { *c = append(*c, f) }

func (c closers) close() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}
