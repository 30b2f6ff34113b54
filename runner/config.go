package runner

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/session"
	"github.com/warren-mesh/warren/runner/templates"
)

// Config configures one user's runner. It is passed by value and validated by New; zero values take the
// documented defaults.
type Config struct {
	// Issuer, User and Epoch identify the sandbox (issuer and user are required; epoch is the placement's
	// fencing token, >= 0).
	Issuer string
	User   string
	Epoch  int64
	// Region is reported to agent clients in the ready message.
	Region string

	// Listen is the address of the internal API (default "127.0.0.1:0"). It should stay on loopback: only
	// the edge calls it.
	Listen string
	// Listener, when set, is used instead of listening on Listen: a production runner opens it first so it
	// can take its owner lock (with this address) before it restores and serves. Connections that arrive
	// meanwhile wait in the listen backlog. Run closes it.
	Listener net.Listener
	// Workspace is the user's directory, created 0700 if missing; commands see it at /workspace.
	Workspace string
	// StateDir is the runner's private directory (created 0700 if set). It must not be inside Workspace;
	// it is never mounted into the sandbox.
	StateDir string
	// Key is the bearer key every request but /healthz must carry (required).
	Key string

	// Insecure runs commands without bubblewrap (the -insecure-no-sandbox flag).
	Insecure bool
	// BwrapPath is the bubblewrap binary (default: "bwrap" looked up in PATH).
	BwrapPath string
	// UIDDir holds the locks of the host uids sandboxes run as (default isolate.DefaultUIDDir); used when
	// the runner runs as root.
	UIDDir string
	// CgroupParent is the control group under which the sandbox's own is made (default "/warren"); "-"
	// makes none (the task driver's limits alone then hold).
	CgroupParent string
	// HostNetwork shares the runner's network with the sandbox instead of giving it one of its own
	// (-sandbox-network=host; development only: every host listener on loopback is reachable).
	HostNetwork bool
	// PreviewHostLoopback lets preview URLs reach the host's loopback when the sandbox has no network of its
	// own (HostNetwork, or Insecure): development only, where the host is the developer's machine. Without
	// it such a runner refuses preview requests, which would otherwise put every service listening on the
	// host's loopback (Nomad, Consul, the runner's neighbours) on the internet.
	PreviewHostLoopback bool
	// NetworkStack is the sandbox network's stack when it has one of its own: isolate.StackVeth (kernel
	// networking, no process per sandbox; "" means it) or isolate.StackPasta (-sandbox-network).
	NetworkStack string
	// NetPool4 and NetPool6 are the private ranges veth networks take their addresses from (default
	// isolate.DefaultPool4, DefaultPool6); every runner of a host must have the same.
	NetPool4, NetPool6 netip.Prefix
	// Pasta and Nsenter are the programs the sandbox's network needs (default: looked up in PATH; pasta
	// only for isolate.StackPasta).
	Pasta, Nsenter string
	// EgressAllow opens destinations the sandbox network refuses by default (private, link-local,
	// loopback and the host's addresses), e.g. a package mirror.
	EgressAllow []netip.Prefix

	// DefaultExecTimeout applies when a request gives no timeoutMs (default 60s); MaxExecTimeout caps
	// what a request may ask for (default 10m).
	DefaultExecTimeout time.Duration
	MaxExecTimeout     time.Duration
	// OutputCap bounds each of stdout and stderr of a synchronous exec (default 1 MiB).
	OutputCap int64
	// StreamOutputCap bounds the total output forwarded by a streamed exec (default 16 MiB).
	StreamOutputCap int64
	// MaxFileSize bounds a file upload (default 256 MiB).
	MaxFileSize int64
	// ShutdownTimeout bounds the graceful shutdown (default 10s), shorter than a scheduler's kill timeout.
	ShutdownTimeout time.Duration

	// Agent runs agent turns; nil means Model decides (the Claude Code driver behind the metered model
	// proxy), or, without Model, session.NoAgent (every turn fails with unavailable).
	Agent session.Agent
	// Model configures the agent: the Claude Code CLI in the sandbox, talking only to the runner's model
	// proxy. Nil: no agent.
	Model *ModelConfig
	// Snapshots persists the workspace and the agent's transcripts: restored on start, written after every
	// completed turn and before sleeping, fenced by Epoch. Nil: nothing is persisted.
	Snapshots blob.Store
	// SnapshotPrefix names this sandbox in the store (e.g. "sandboxes/<sandbox id>").
	SnapshotPrefix string
	// SnapshotRegions are the other regions' snapshot stores by region name; Snapshots is Region's. Set,
	// the runner resumes from the newest snapshot of every region and records Region in its own
	// (docs/ARCHITECTURE.md#regions); a region whose store cannot be read fails the start (unavailable).
	// Nil: a single region, nothing recorded.
	SnapshotRegions map[string]blob.Store
	// Template names the issuer's workspace template a new sandbox (one without a snapshot of its own)
	// starts from (runner/templates); "" is templates.DefaultName, "-" none. Read from Snapshots and
	// SnapshotRegions.
	Template string
	// IdleTimeout: with no client attached, no turn running and no command running for that long, the
	// runner snapshots and exits (the sandbox sleeps). 0 disables.
	IdleTimeout time.Duration
	// AgentIdle is how long a session's agent process outlives its last client when no turn runs (default
	// DefaultAgentIdle); a client attaching starts it again in the background, resuming the transcript.
	AgentIdle time.Duration
	// ProcessKeepAwake is the operator's cap on how long background processes keep an otherwise idle
	// sandbox awake: while one runs and the last request is less than this ago, the sandbox does not sleep
	// (default 24h; negative: processes never keep it awake). When it sleeps, its processes are killed.
	ProcessKeepAwake time.Duration
	// MaxProcesses bounds the background processes running at once (default 16); as many exited ones are
	// kept for listing. ProcessLogBytes bounds the output kept of each (default 1 MiB).
	MaxProcesses    int
	ProcessLogBytes int64
	// Tasks configures one-shot tasks (POST /v1/execute); the zero value takes the defaults.
	Tasks TaskConfig
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ModelConfig is the agent's side of a runner.
type ModelConfig struct {
	CLIPath      string            // host path of the Claude Code CLI
	Home         string            // host dir mounted as the agent's HOME (transcripts); required
	Upstream     string            // the model API the proxy forwards to
	APIKey       string            // the real key; stays in the proxy
	Reserver     billing.Reserver  // the ledger holds budget before each call
	Prices       billing.Prices    // zero value: billing.DefaultPrices()
	Env          map[string]string // extra env for the CLI (e.g. ANTHROPIC_CUSTOM_HEADERS)
	DefaultModel string
	Notice       string // shown to clients in control ready (e.g. "scripted demo model")
	// Grace is what a session may spend, in microdollars, while the ledger cannot be reached (its usage
	// is spooled and recorded later); 0 disables.
	Grace int64
	// AllowFields and AllowBetas are the operator's additions to what the model proxy forwards
	// (modelproxy.Config.AllowFields, AllowBetas): top-level request fields and anthropic-beta values.
	AllowFields, AllowBetas []string
}

// Defaults.
const (
	DefaultListen           = "127.0.0.1:0"
	DefaultExecTimeout      = 60 * time.Second
	DefaultMaxExecTimeout   = 10 * time.Minute
	DefaultOutputCap        = 1 << 20
	DefaultStreamOutputCap  = 16 << 20
	DefaultMaxFileSize      = 256 << 20
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultProcessKeepAwake = 24 * time.Hour
	DefaultAgentIdle        = time.Minute
	DefaultMaxProcesses     = 16
	DefaultProcessLogBytes  = 1 << 20
)

// withDefaults fills zero values and checks the fields that need no I/O.
func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.UIDDir == "" {
		c.UIDDir = isolate.DefaultUIDDir
	}
	switch c.CgroupParent {
	case "":
		c.CgroupParent = "/warren"
	case "-":
		c.CgroupParent = ""
	}
	if c.Pasta == "" {
		c.Pasta = "pasta"
	}
	switch c.NetworkStack {
	case "":
		c.NetworkStack = isolate.StackVeth
	case isolate.StackVeth, isolate.StackPasta:
	default:
		return c, fmt.Errorf("%w: sandbox network stack %q: want %s or %s", ErrConfig, c.NetworkStack, isolate.StackVeth, isolate.StackPasta)
	}
	if c.Nsenter == "" {
		c.Nsenter = "nsenter"
	}
	if c.DefaultExecTimeout == 0 {
		c.DefaultExecTimeout = DefaultExecTimeout
	}
	if c.MaxExecTimeout == 0 {
		c.MaxExecTimeout = DefaultMaxExecTimeout
	}
	if c.OutputCap == 0 {
		c.OutputCap = DefaultOutputCap
	}
	if c.StreamOutputCap == 0 {
		c.StreamOutputCap = DefaultStreamOutputCap
	}
	if c.MaxFileSize == 0 {
		c.MaxFileSize = DefaultMaxFileSize
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.AgentIdle <= 0 {
		c.AgentIdle = DefaultAgentIdle
	}
	if c.ProcessKeepAwake == 0 {
		c.ProcessKeepAwake = DefaultProcessKeepAwake
	}
	if c.MaxProcesses == 0 {
		c.MaxProcesses = DefaultMaxProcesses
	}
	if c.ProcessLogBytes == 0 {
		c.ProcessLogBytes = DefaultProcessLogBytes
	}
	if c.Agent == nil && c.Model == nil {
		c.Agent = session.NoAgent{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	var errs []string
	check := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, msg)
		}
	}
	check(c.Issuer != "", "issuer is required")
	check(c.User != "", "user is required")
	check(c.Epoch >= 0, "epoch must not be negative")
	check(c.Key != "", "key is required")
	check(c.Workspace != "", "workspace is required")
	check(c.DefaultExecTimeout > 0 && c.MaxExecTimeout > 0, "exec timeouts must be positive")
	check(c.DefaultExecTimeout <= c.MaxExecTimeout, "the default exec timeout exceeds the maximum")
	check(c.OutputCap > 0 && c.StreamOutputCap > 0 && c.MaxFileSize > 0, "caps must be positive")
	check(c.ShutdownTimeout > 0, "shutdown timeout must be positive")
	check(c.MaxProcesses > 0 && c.MaxProcesses <= 1024, "max processes must be 1 to 1024")
	check(c.ProcessLogBytes > 0, "process log bytes must be positive")
	check(len(c.SnapshotRegions) == 0 || c.Snapshots != nil, "other regions' snapshot stores need this region's (Snapshots)")
	check(c.Template == "" || c.Template == "-" || templates.CheckName(c.Template) == nil, fmt.Sprintf("template %q is not a template name", c.Template))
	if len(errs) > 0 {
		return c, fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return c, nil
}

// prepareDirs creates the workspace and state dir and resolves them to absolute, symlink-free paths, so
// the sandbox mounts exactly the directory meant and the containment check below is sound.
func (c *Config) prepareDirs() error {
	ws, err := ensureDir(c.Workspace)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	c.Workspace = ws
	if c.StateDir == "" {
		return nil
	}
	st, err := ensureDir(c.StateDir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	c.StateDir = st
	if rel, err := filepath.Rel(ws, st); err == nil && filepath.IsLocal(rel) {
		return fmt.Errorf("%w: state dir %s is inside the workspace %s, which the sandbox can see", ErrConfig, st, ws)
	}
	return nil
}

func ensureDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", real, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrConfig, real)
	}
	return real, nil
}

// findBwrap resolves the bubblewrap binary, failing with advice that names the escape hatch.
func (c *Config) findBwrap() error {
	if c.Insecure {
		return nil
	}
	name := c.BwrapPath
	if name == "" {
		name = "bwrap"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (%s): install bubblewrap, or pass -insecure-no-sandbox to run commands unconfined (development only)", ErrNoBwrap, name)
		}
		return fmt.Errorf("%w (%s): %w", ErrNoBwrap, name, err)
	}
	c.BwrapPath = p
	return nil
}

// snapshotRegion is the region the snapshots record: Region when other regions' stores are configured,
// none in a single-region deployment (whose snapshots stay as they were before regions).
func (c *Config) snapshotRegion() string {
	if len(c.SnapshotRegions) == 0 {
		return ""
	}
	return c.Region
}
