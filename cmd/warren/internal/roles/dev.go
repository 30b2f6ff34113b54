package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/playground"
	"github.com/warren-mesh/warren/internal/tools"
)

func init() {
	register("dev", "run the whole platform on this machine with embedded defaults", runDev)
}

// devFlags are warren dev's flags.
type devFlags struct {
	dataDir, listen, previewListen, region, logLevel string
	insecure, hostNet, noAgent                       bool
	startTimeout, idle                               time.Duration
	claudeCLI, upstream, model, cors                 string
}

// register defines every flag of warren dev on fs.
func (f *devFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", env.DataDir(), "where secrets, databases and sandboxes live ($WARREN_DATA_DIR)")
	fs.StringVar(&f.listen, "listen", env.Or("WARREN_LISTEN", "127.0.0.1:8080"), "edge listen address ($WARREN_LISTEN)")
	fs.StringVar(&f.previewListen, "preview-listen", os.Getenv("WARREN_PREVIEW_LISTEN"), "listen address of preview URLs (/preview/<token>/), an origin apart from the edge's and the playground's; default: -listen's host at the next port, 127.0.0.1:8081 ($WARREN_PREVIEW_LISTEN)")
	fs.StringVar(&f.region, "region", env.Or("WARREN_REGION", "local"), "region name ($WARREN_REGION)")
	fs.BoolVar(&f.insecure, "insecure-no-sandbox", false, "run user commands without bubblewrap isolation (only for machines without bwrap)")
	fs.BoolVar(&f.hostNet, "sandbox-host-network", false, "sandboxes share this machine's network (every loopback listener is reachable from them); for machines where warren does not run as root")
	fs.DurationVar(&f.startTimeout, "start-timeout", 30*time.Second, "how long a sandbox may take to start")
	fs.StringVar(&f.logLevel, "log-level", env.Or("WARREN_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.StringVar(&f.claudeCLI, "claude-cli", tools.FindClaudeCLI(), "Claude Code CLI the sandboxes run ($WARREN_CLAUDE_CLI; default: the `make tools` cache, then PATH)")
	fs.BoolVar(&f.noAgent, "no-agent", false, "run sandboxes without the agent (exec and files only)")
	fs.StringVar(&f.upstream, "model-upstream", env.Or("ANTHROPIC_BASE_URL", "https://api.anthropic.com"), "model API used with $ANTHROPIC_API_KEY")
	fs.DurationVar(&f.idle, "idle-timeout", 10*time.Minute, "a sandbox sleeps (snapshot, exit) after this long idle; 0 never")
	fs.StringVar(&f.model, "model", "", "default model of new sessions")
	fs.StringVar(&f.cors, "cors-origins", env.Or("WARREN_CORS_ORIGINS", "*"), "comma-separated origins (scheme://host[:port], * for any) whose browser pages may call GET /v1/regions and the sandbox API; \"\" for none ($WARREN_CORS_ORIGINS)")
}

// config is the stack's configuration from the flags, the model key from $ANTHROPIC_API_KEY; the
// warnings of unsafe settings go to stderr.
func (f *devFlags) config(stderr io.Writer, log *slog.Logger) (devstack.Config, error) {
	corsOrigins, err := edge.ParseCORSOrigins(f.cors)
	if err != nil {
		return devstack.Config{}, fmt.Errorf("-cors-origins: %w", err)
	}
	if corsOrigins == nil {
		corsOrigins = []string{} // none (nil would be devstack's default, any)
	}
	if f.insecure {
		fmt.Fprintln(stderr, "WARNING: -insecure-no-sandbox: user commands run WITHOUT isolation, as this user, on this machine.")
	}
	if f.hostNet {
		fmt.Fprintln(stderr, "WARNING: -sandbox-host-network: sandboxes reach every listener of this machine, the edge and each other's runners included.")
	}
	if !f.insecure && !f.hostNet && os.Geteuid() != 0 {
		return devstack.Config{}, fmt.Errorf("sandboxes get a host uid and a network of their own only when warren runs as root: run it as root (e.g. sudo make dev), or pass -sandbox-host-network")
	}
	cli := f.claudeCLI
	if f.noAgent {
		cli = ""
	} else if cli == "" {
		return devstack.Config{}, fmt.Errorf("the Claude Code CLI is not installed: run `make tools` (or pass -claude-cli, or -no-agent)")
	}
	return devstack.Config{
		DataDir: f.dataDir, Listen: f.listen, PreviewListen: f.previewListen, Region: f.region, Insecure: f.insecure, HostNetwork: f.hostNet,
		StartTimeout: f.startTimeout.Abs(), Logger: log,
		ClaudeCLI: cli, ModelAPIKey: os.Getenv("ANTHROPIC_API_KEY"), ModelUpstream: f.upstream, IdleTimeout: f.idle, DefaultModel: f.model,
		CORSOrigins: corsOrigins, DemoPrice: devstack.DemoModelPrice,
	}, nil
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren dev [flags]\n\nRuns every role in one process on this machine.")
	var f devFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	cfg, err := f.config(stderr, log)
	if err != nil {
		return err
	}
	st, err := devstack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	printBanner(stdout, stderr, st, cfg)
	select {
	case <-ctx.Done():
	case err := <-st.Served():
		if !errors.Is(err, http.ErrServerClosed) {
			_ = st.Close()
			return fmt.Errorf("edge server: %w", err)
		}
	}
	fmt.Fprintln(stderr, "shutting down: stopping sandboxes...")
	return st.Close()
}

// printBanner says what runs where and how to try it.
func printBanner(stdout, stderr io.Writer, st *devstack.Stack, cfg devstack.Config) {
	cli, apiKey := cfg.ClaudeCLI, cfg.ModelAPIKey
	created := "existing"
	if st.Created {
		created = "created"
	}
	fmt.Fprintf(stdout, `warren dev is running
  edge       %[1]s   (WebSocket %[1]s/ws, REST %[1]s/v1/sandbox/..., metrics %[1]s/metrics)
%[9]s  playground %[10]s   (chat, files and exec in the browser; %[11]s)
  previews   %[12]s/preview/<token>/   (preview URLs, an origin of their own: nothing else is served there)
  scheduler  local process driver, region %[2]q
  billing    SQLite ledger in %[3]s; admin API %[1]s/v1/{issuers,quotas,usage,prices} (try: %[7]s admin issuers ls)
  issuer     %[4]q (%[5]s; secret in %[3]s/secrets.json)
  webhooks   tasks' webhooks are signed per issuer (may target http://localhost); the issuer's secret:
             %[7]s webhook-secret -data-dir %[3]s -issuer %[4]s
  isolation  %[6]s
  agent      %[8]s

Try it:
  export WARREN_URL=%[1]s
  export WARREN_TOKEN=$(%[7]s token -data-dir %[3]s -user alice)
  %[7]s exec -- 'echo hi > f && cat f'
  %[7]s files get f
  %[7]s chat -p "create hello.txt containing hi"
`, st.URL(), cfg.Region, cfg.DataDir, devstack.DevIssuer, created, IsolationLabel(cfg.Insecure), os.Args[0], agentLabel(cli, apiKey, st), wtLabel(st), st.PlaygroundURL(), playgroundLabel(), st.PreviewURL())
	if cli != "" && apiKey == "" {
		fmt.Fprintln(stderr, "\n*** NO ANTHROPIC_API_KEY: a built-in SCRIPTED demo model answers every prompt, not Claude. ***\n*** Export ANTHROPIC_API_KEY and restart to use the real API.                              ***")
	}
}

// playgroundLabel says whether the playground's SDK is built into this binary.
func playgroundLabel() string {
	if playground.SDKBuilt() {
		return "the TypeScript SDK's browser build is embedded"
	}
	return "SDK MISSING: run make sdk-js (or make build) and rebuild"
}

// wtLabel is the WebTransport line of the banner ("" when it is off).
func wtLabel(st *devstack.Stack) string {
	if st.WebTransportURL() == "" {
		return ""
	}
	return fmt.Sprintf("  webtransport %s   (UDP; self-signed certificate, its SHA-256 in %s/v1/regions)\n", st.WebTransportURL(), st.URL())
}

func agentLabel(cli, apiKey string, st *devstack.Stack) string {
	switch {
	case cli == "":
		return "off (-no-agent)"
	case apiKey == "":
		return "Claude Code " + cli + " → SCRIPTED demo model at " + st.Model.URL() + " (no ANTHROPIC_API_KEY; demo price $" + devstack.DemoModelPrice + " per million tokens)"
	default:
		return "Claude Code " + cli + " → the Anthropic API (key from $ANTHROPIC_API_KEY)"
	}
}

// IsolationLabel is how the sandboxes of warren dev (and warren bench's) are isolated, for banners.
func IsolationLabel(insecure bool) string {
	if insecure {
		return "NONE (-insecure-no-sandbox)"
	}
	return "bubblewrap, a host uid, network and cgroup per sandbox (SECURITY.md)"
}
