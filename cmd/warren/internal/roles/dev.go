package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/playground"
	"github.com/warren-mesh/warren/internal/tools"
)

func init() {
	register("dev", "run the whole platform on this machine with embedded defaults", runDev)
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", env.DataDir(), "where secrets, databases and sandboxes live ($WARREN_DATA_DIR)")
	listen := fs.String("listen", env.Or("WARREN_LISTEN", "127.0.0.1:8080"), "edge listen address ($WARREN_LISTEN)")
	previewListen := fs.String("preview-listen", os.Getenv("WARREN_PREVIEW_LISTEN"), "listen address of preview URLs (/preview/<token>/), an origin apart from the edge's and the playground's; default: -listen's host at the next port, 127.0.0.1:8081 ($WARREN_PREVIEW_LISTEN)")
	region := fs.String("region", env.Or("WARREN_REGION", "local"), "region name ($WARREN_REGION)")
	insecure := fs.Bool("insecure-no-sandbox", false, "run user commands without bubblewrap isolation (only for machines without bwrap)")
	hostNet := fs.Bool("sandbox-host-network", false, "sandboxes share this machine's network (every loopback listener is reachable from them); for machines where warren does not run as root")
	startTimeout := fs.Duration("start-timeout", 30*time.Second, "how long a sandbox may take to start")
	logLevel := fs.String("log-level", env.Or("WARREN_LOG_LEVEL", "info"), "debug, info, warn or error")
	claudeCLI := fs.String("claude-cli", tools.FindClaudeCLI(), "Claude Code CLI the sandboxes run ($WARREN_CLAUDE_CLI; default: the `make tools` cache, then PATH)")
	noAgent := fs.Bool("no-agent", false, "run sandboxes without the agent (exec and files only)")
	upstream := fs.String("model-upstream", env.Or("ANTHROPIC_BASE_URL", "https://api.anthropic.com"), "model API used with $ANTHROPIC_API_KEY")
	idle := fs.Duration("idle-timeout", 10*time.Minute, "a sandbox sleeps (snapshot, exit) after this long idle; 0 never")
	model := fs.String("model", "", "default model of new sessions")
	corsFlag := fs.String("cors-origins", env.Or("WARREN_CORS_ORIGINS", "*"), "comma-separated origins (scheme://host[:port], * for any) whose browser pages may call GET /v1/regions and the sandbox API; \"\" for none ($WARREN_CORS_ORIGINS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	corsOrigins, err := edge.ParseCORSOrigins(*corsFlag)
	if err != nil {
		return fmt.Errorf("-cors-origins: %w", err)
	}
	if corsOrigins == nil {
		corsOrigins = []string{} // none (nil would be devstack's default, any)
	}
	if *insecure {
		fmt.Fprintln(stderr, "WARNING: -insecure-no-sandbox: user commands run WITHOUT isolation, as this user, on this machine.")
	}
	if *hostNet {
		fmt.Fprintln(stderr, "WARNING: -sandbox-host-network: sandboxes reach every listener of this machine, the edge and each other's runners included.")
	}
	if !*insecure && !*hostNet && os.Geteuid() != 0 {
		return fmt.Errorf("sandboxes get a host uid and a network of their own only when warren runs as root: run it as root (e.g. sudo make dev), or pass -sandbox-host-network")
	}
	cli := *claudeCLI
	if *noAgent {
		cli = ""
	} else if cli == "" {
		return fmt.Errorf("the Claude Code CLI is not installed: run `make tools` (or pass -claude-cli, or -no-agent)")
	}
	apiKey := os.Getenv("ANTHROPIC_API_KEY")
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: *dataDir, Listen: *listen, PreviewListen: *previewListen, Region: *region, Insecure: *insecure, HostNetwork: *hostNet,
		StartTimeout: startTimeout.Abs(), Logger: log,
		ClaudeCLI: cli, ModelAPIKey: apiKey, ModelUpstream: *upstream, IdleTimeout: *idle, DefaultModel: *model,
		CORSOrigins: corsOrigins,
	})
	if err != nil {
		return err
	}
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
`, st.URL(), *region, *dataDir, devstack.DevIssuer, created, IsolationLabel(*insecure), os.Args[0], agentLabel(cli, apiKey, st), wtLabel(st), st.PlaygroundURL(), playgroundLabel(), st.PreviewURL())
	if cli != "" && apiKey == "" {
		fmt.Fprintln(stderr, "\n*** NO ANTHROPIC_API_KEY: a built-in SCRIPTED demo model answers every prompt, not Claude. ***\n*** Export ANTHROPIC_API_KEY and restart to use the real API.                              ***")
	}

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
		return "Claude Code " + cli + " → SCRIPTED demo model at " + st.Model.URL() + " (no ANTHROPIC_API_KEY)"
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
