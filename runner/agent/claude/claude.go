// Package claude is the agent driver that runs the Claude Code CLI inside the sandbox's bubblewrap
// boundary. It implements session.Agent: each live session has one CLI process in stream-json mode
// (`claude -p --input-format=stream-json --output-format=stream-json --verbose`), reused across turns; a
// turn writes the user message to its stdin and relays every JSON line of its stdout until the `result`.
//
// The CLI sees only the sandbox: the workspace at /workspace (its cwd), its own binary read-only at
// CLIMount, Config.Home read-write at HomeMount (HOME, and CLAUDE_CONFIG_DIR=HOME/.claude, where its
// transcripts live: projects/<cwd slug>/<session>.jsonl), and an environment built from scratch whose
// ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY are the runner's model proxy and a per-session token, never the
// real key. A process that dies is replaced at the next turn by one that resumes the transcript.
package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/tools"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/isolate"
	"github.com/warren-mesh/warren/runner/session"
)

// Permissions are the token's permissions claim (docs/PROTOCOL.md#tokens).
type Permissions struct {
	// Tools, when non-nil, are the only built-in tools the agent may use (an empty list: none).
	Tools []string
	// BlockedTools are always disallowed.
	BlockedTools []string
	// MaxTurns caps the agent turns per prompt (0: no cap).
	MaxTurns int
	// Model, when set, is the only model allowed.
	Model string
}

// Config configures a Driver.
type Config struct {
	// CLIPath is the host path of the claude binary; it is mounted read-only at CLIMount.
	CLIPath string
	// Workspace is the host directory mounted at /workspace.
	Workspace string
	// Home is the host directory mounted at HomeMount (created if missing). Transcripts live in it, so it
	// must outlive processes (and runners, through snapshots) for sessions to resume.
	Home string
	// Bwrap is the bubblewrap binary; required unless Insecure.
	Bwrap string
	// Insecure runs the CLI without bubblewrap (host paths, same cleared environment).
	Insecure bool
	// Sandbox, when set, is the runner's sandbox (its host uid, network and cgroup), in which the CLI runs
	// like every other command; Bwrap and Insecure are then ignored.
	Sandbox *isolate.Sandbox
	// Endpoint returns the model API the CLI of a session talks to (the runner's proxy) and the key it
	// uses (a per-session token). It is called each time a process starts. Required.
	Endpoint func(sessionID string) (baseURL, apiKey string, err error)
	// Watch, when set, runs for the life of each agent process (ctx ends when it exits); kill ends the
	// process, and the turn running then fails naming the cause. The runner passes its workspace disk
	// guard, so an agent (its own writes and its tools') is held to the workspace's cap as a command is.
	Watch func(ctx context.Context, kill context.CancelCauseFunc)
	// Release, when set, is called once the process an Endpoint key was given to has exited (or could not
	// start), so the key can be revoked: a key never outlives its process.
	Release func(sessionID, apiKey string)
	// Env is added to the CLI's environment (e.g. ANTHROPIC_CUSTOM_HEADERS); it may not set the variables
	// the driver sets itself (PATH, HOME, ANTHROPIC_BASE_URL, ...).
	Env map[string]string
	// Decorate, when set, rewrites each `result` event before it is emitted (the runner adds its cost
	// extension there). It is called from the turn's goroutine.
	Decorate func(sessionID string, event []byte) []byte
	// Permissions and SDKConfig come from the token and override the client's session options.
	Permissions Permissions
	SDKConfig   json.RawMessage
	// Policy, when set, replaces Permissions and SDKConfig and is asked at every turn of a session and at
	// every Check; meta is what the connection carries (session.Turn.Meta: in the runner, its grant).
	Policy func(sessionID string, meta any) (Permissions, json.RawMessage)
	// AllowBeta says whether the model proxy lets an anthropic-beta value through; a client's betas must
	// pass it (nil: no client beta is allowed).
	AllowBeta func(beta string) bool
	// DefaultModel is used when neither the client nor the token picks a model; "" leaves it to the CLI.
	DefaultModel string
	// Logger; nil discards.
	Logger *slog.Logger

	// IdleTimeout stops a session's process after that long without a turn (default 10 minutes); the next
	// turn resumes the transcript in a new process.
	IdleTimeout time.Duration
	// AgentIdle stops a session's process that long after its last client left (session.Warmer's Cool)
	// when no turn runs (default 60 s): an idle user costs no CLI. The next client's attach (Warm) starts
	// one again in the background, resuming the transcript.
	AgentIdle time.Duration
	// InterruptGrace is how long an interrupted turn waits for the CLI's own `result` before the process is
	// killed (default 5 s).
	InterruptGrace time.Duration
}

const (
	defaultIdleTimeout    = 10 * time.Minute
	defaultAgentIdle      = time.Minute
	defaultInterruptGrace = 5 * time.Second
	writeTimeout          = 10 * time.Second
	shutdownGrace         = 2 * time.Second
	// exitDrain bounds how long output is still read after the process has exited.
	exitDrain = 2 * time.Second
	// noiseLogs is how many non-JSON stdout lines per turn are logged.
	noiseLogs = 5
)

// Driver runs agent turns with the Claude Code CLI. It is safe for concurrent use.
type Driver struct {
	cfg    Config
	log    *slog.Logger
	sb     *isolate.Sandbox
	sdk    map[string]json.RawMessage
	life   context.Context // processes live until Close cancels it
	cancel context.CancelFunc
	reqID  atomic.Uint64

	models *modelTable

	mu       sync.Mutex // guards sessions, closed and background.Add
	sessions map[string]*agentSession
	closed   bool
	closing  chan struct{} // closed by Close: warm-ups waiting for a turn give up
	// background counts idle stops and warm-ups in progress; Close waits for them.
	background sync.WaitGroup
}

var (
	_ session.Agent   = (*Driver)(nil)
	_ session.Checker = (*Driver)(nil)
	_ session.Warmer  = (*Driver)(nil)
)

// agentSession is the driver's state for one hub session.
type agentSession struct {
	id    string // hub id
	cliID string
	// turn is a one-slot semaphore held by a running turn (and by the idle stop): it guards proc,
	// lastUsed and idle.
	turn     chan struct{}
	proc     *cliProc
	optsKey  string // the effective options proc was started with
	started  bool   // a prompt of this session has reached a process
	lastUsed time.Time
	idle     *time.Timer
	// live mirrors proc for Close, which must not wait for a running turn.
	liveMu sync.Mutex
	live   *cliProc
	// wantMu guards cooling and unwanted: whether the session's last client left (Cool, until the next
	// Warm; a session the hub never told about is not cooling), and the timer that releases its process
	// after AgentIdle.
	wantMu   sync.Mutex
	cooling  bool
	unwanted *time.Timer
}

// New validates cfg and prepares the sandbox; it starts no process.
func New(cfg Config) (*Driver, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	if cfg.InterruptGrace <= 0 {
		cfg.InterruptGrace = defaultInterruptGrace
	}
	if cfg.AgentIdle <= 0 {
		cfg.AgentIdle = defaultAgentIdle
	}
	if cfg.Endpoint == nil {
		return nil, fmt.Errorf("%w: Endpoint is required", ErrConfig)
	}
	if fi, err := os.Stat(cfg.CLIPath); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 || !filepath.IsAbs(cfg.CLIPath) {
		return nil, fmt.Errorf("%w: CLIPath %q is not an absolute path to an executable file", ErrConfig, cfg.CLIPath)
	}
	if !filepath.IsAbs(cfg.Home) {
		return nil, fmt.Errorf("%w: Home %q is not an absolute path", ErrConfig, cfg.Home)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Home, ".claude"), 0o700); err != nil {
		return nil, fmt.Errorf("%w: create home: %w", ErrConfig, err)
	}
	if err := isolate.ValidateEnv(cfg.Env); err != nil {
		return nil, fmt.Errorf("%w: Env: %w", ErrConfig, err)
	}
	for k := range cfg.Env {
		for _, r := range reservedEnv {
			if k == r {
				return nil, fmt.Errorf("%w: Env may not set %s", ErrConfig, k)
			}
		}
	}
	sdk, err := parseSDKConfig(cfg.SDKConfig)
	if err != nil {
		return nil, err
	}
	sb := cfg.Sandbox
	if sb == nil {
		var err error
		if sb, err = isolate.New(isolate.Config{Workspace: cfg.Workspace, Bwrap: cfg.Bwrap, Insecure: cfg.Insecure, HostNetwork: !cfg.Insecure}); err != nil {
			return nil, fmt.Errorf("claude agent sandbox: %w", err)
		}
	} else {
		cfg.Insecure = sb.Insecure()
	}
	if uid, gid, ok := sb.Owner(); ok {
		// The CLI runs as the sandbox's host uid and writes its transcripts here.
		if err := isolate.Chown(cfg.Home, uid, gid); err != nil {
			return nil, fmt.Errorf("%w: give the home to the sandbox: %w", ErrConfig, err)
		}
	}
	models, version := newModelTable(cfg.CLIPath, cfg.Env)
	if !models.pinned {
		cfg.Logger.Info("model aliases are resolved by asking the agent once, before the first ready",
			"cli_version", version, "pinned_version", tools.ClaudeCodeVersion, "model_env", steersModel(cfg.Env))
	}
	life, cancel := context.WithCancel(context.Background())
	return &Driver{
		cfg: cfg, log: cfg.Logger, sb: sb, sdk: sdk, life: life, cancel: cancel, models: models,
		sessions: make(map[string]*agentSession), closing: make(chan struct{}),
	}, nil
}

// Close ends every CLI process (end of input, then a kill after a short grace or when ctx ends) and makes
// later turns fail with unavailable. Running turns end with a synthesized error result. It is idempotent.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		close(d.closing)
	}
	d.closed = true
	sessions := make([]*agentSession, 0, len(d.sessions))
	for _, s := range d.sessions {
		sessions = append(sessions, s)
	}
	d.mu.Unlock()
	d.background.Wait()

	grace := shutdownGrace
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < grace {
		grace = max(time.Until(dl), 0)
	}
	var wg sync.WaitGroup
	for _, s := range sessions {
		s.liveMu.Lock()
		p := s.live
		s.liveMu.Unlock()
		if p != nil {
			wg.Go(func() { p.shutdown(grace) })
		}
	}
	wg.Wait()
	d.cancel()
	return nil
}

// Run implements session.Agent: it runs one turn of turn.SessionID in the session's CLI process, starting
// (or resuming) the process when there is none.
//
// Errors: invalid_argument for options or a message the CLI cannot take; unavailable when the driver is
// closed, the process cannot start or it exits during the turn (after a synthesized error `result`);
// ctx's error when the turn was interrupted (after the CLI's own `result`, or a synthesized one when the
// CLI had to be killed).
func (d *Driver) Run(ctx context.Context, turn session.Turn, emit func(event []byte)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	opts, perms, err := d.effective(turn.SessionID, turn.Options, turn.Meta)
	if err != nil {
		return err
	}
	s, err := d.session(turn.SessionID)
	if err != nil {
		return err
	}
	input, err := userLine(turn.Message, s.cliID)
	if err != nil {
		return err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer d.release(s)
	log := d.log.With("session", s.id)

	if err := d.ready(s, opts, perms, true, log); err != nil {
		return err
	}
	p := s.proc
	drainStale(p, log)
	if turn.Tools != nil {
		defer p.bridge.begin(ctx, turn.Tools)()
	}
	t := &turnRun{d: d, s: s, p: p, log: log, emit: emit, start: time.Now()}
	if err := p.write(input, writeTimeout); err != nil {
		return t.exited(fmt.Errorf("write the prompt: %w", err))
	}
	s.started = true
	return t.relay(ctx)
}

// ready makes sure the session has a live process started with opts; s.turn is held. A process started
// with other options is restarted when restart is set (a prompt: the CLI's flags are fixed at start) and
// kept otherwise (a warm-up: the prompt decides).
func (d *Driver) ready(s *agentSession, opts wire.SessionOptions, perms Permissions, restart bool, log *slog.Logger) error {
	if s.proc != nil && s.proc.exited() {
		d.setProc(s, nil)
	}
	key := optionsKey(opts)
	if s.proc != nil && s.optsKey != key && restart {
		// Another token (other permissions, model or sdkConfig) prompts this session now: the CLI's flags
		// are fixed at start, so it resumes in a new process under the new ones.
		log.Info("agent options changed; restarting the agent process")
		s.proc.shutdown(shutdownGrace)
		d.setProc(s, nil)
	}
	if s.proc != nil {
		return nil
	}
	d.releaseCooling(s)
	p, err := d.start(s, opts, perms.Model != "", log)
	if err != nil {
		return err
	}
	d.setProc(s, p)
	s.optsKey = key
	return nil
}

// effective is the options a session runs with under the policy of meta (the connection's grant).
func (d *Driver) effective(sessionID string, client wire.SessionOptions, meta any) (wire.SessionOptions, Permissions, error) {
	perms, sdk := d.cfg.Permissions, d.sdk
	if d.cfg.Policy != nil {
		// The prompting connection's token decides each turn.
		var raw json.RawMessage
		perms, raw = d.cfg.Policy(sessionID, meta)
		parsed, err := parseSDKConfig(raw)
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) {
				we = wire.Errorf(wire.InvalidArgument, "the token's sdkConfig is not a JSON object")
			}
			return wire.SessionOptions{}, perms, we
		}
		sdk = parsed
	}
	opts, err := effectiveOptions(client, sdk, perms, d.cfg.DefaultModel, d.cfg.AllowBeta)
	return opts, perms, err
}

// Check implements session.Checker: before a connection is attached it validates the session options
// under the connection's token, so that nothing is refused (or dropped) later, and says which model the
// session uses. An explicit sessionId must name a session the hub holds (open) or one with a transcript
// (not_found otherwise); resumeSessionAt must name a message of that transcript.
func (d *Driver) Check(ctx context.Context, c session.Check) (session.Checked, error) {
	opts, _, err := d.effective(c.Options.SessionID, c.Options, c.Meta)
	if err != nil {
		return session.Checked{}, err
	}
	if id := opts.SessionID; id != "" {
		src := transcriptPath(d.cfg.Home, cliSessionID(id))
		if src == "" && (!c.Open || opts.ForkSession) {
			return session.Checked{}, wire.Errorf(wire.NotFound, "session %s not found", id)
		}
		if at := opts.ResumeSessionAt; at != "" {
			if c.Open && !opts.ForkSession {
				return session.Checked{}, wire.Errorf(wire.InvalidArgument, "session option resumeSessionAt: session %s is already open; it applies when a session is resumed or forked", id)
			}
			if !transcriptHas(src, at) {
				return session.Checked{}, wire.Errorf(wire.NotFound, "session option resumeSessionAt: message %s not found in session %s", at, id)
			}
		}
	}
	return session.Checked{Model: d.models.resolve(ctx, d, opts.Model)}, nil
}

// session returns the driver's state for a hub session, creating it.
func (d *Driver) session(id string) (*agentSession, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, wire.Wrap(wire.Unavailable, ErrClosed, "agent shutting down")
	}
	s, ok := d.sessions[id]
	if !ok {
		s = &agentSession{id: id, cliID: cliSessionID(id), turn: make(chan struct{}, 1)}
		d.sessions[id] = s
	}
	return s, nil
}

// Warm implements session.Warmer: a client attached to the session, so its process is started in the
// background (resuming the transcript when there is one) with the options the session runs with under
// that client's token, and the first prompt only writes to its stdin. A process already running is kept,
// even when it was started with other options: the next prompt restarts it if its own differ.
func (d *Driver) Warm(sessionID string, opts wire.SessionOptions, meta any) {
	s, err := d.session(sessionID)
	if err != nil {
		return
	}
	s.want(true, 0, nil)
	d.inBackground(func() { d.warm(s, opts, meta) })
}

// Cool implements session.Warmer: the session's last client left and no turn runs, so its process is
// stopped after AgentIdle unless a client comes back first.
func (d *Driver) Cool(sessionID string) {
	d.mu.Lock()
	s := d.sessions[sessionID]
	d.mu.Unlock()
	if s != nil {
		s.want(false, d.cfg.AgentIdle, func() { d.inBackground(func() { d.stopUnwanted(s) }) })
	}
}

// want records whether a client wants the session; unwanted, stop runs after delay unless wanted again.
func (s *agentSession) want(wanted bool, delay time.Duration, stop func()) {
	s.wantMu.Lock()
	defer s.wantMu.Unlock()
	s.cooling = !wanted
	if s.unwanted != nil {
		s.unwanted.Stop()
		s.unwanted = nil
	}
	if !wanted {
		s.unwanted = time.AfterFunc(delay, stop)
	}
}

func (s *agentSession) isCooling() bool {
	s.wantMu.Lock()
	defer s.wantMu.Unlock()
	return s.cooling
}

// inBackground runs f in a goroutine Close waits for, unless the driver is closed.
func (d *Driver) inBackground(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.background.Add(1)
	go func() {
		defer d.background.Done()
		f()
	}()
}

// warm starts the session's process unless it has one; it waits for a running turn (which leaves one).
func (d *Driver) warm(s *agentSession, client wire.SessionOptions, meta any) {
	opts, perms, err := d.effective(s.id, client, meta)
	if err != nil {
		return // the prompt reports it
	}
	select {
	case s.turn <- struct{}{}:
	case <-d.closing:
		return
	}
	defer d.release(s)
	if s.isCooling() {
		return // the client left already
	}
	log := d.log.With("session", s.id)
	if err := d.ready(s, opts, perms, false, log); err != nil {
		log.Debug("agent process not started ahead of the prompt", "err", err)
	}
}

// stopUnwanted stops a session's process once no client has wanted it for AgentIdle and no turn runs. The
// transcript stays, so the next start resumes it.
func (d *Driver) stopUnwanted(s *agentSession) {
	select {
	case s.turn <- struct{}{}:
	default:
		return // a turn is running; the hub cools the session again when it ends
	}
	defer func() { <-s.turn }()
	if s.proc == nil || !s.isCooling() {
		return
	}
	d.log.Debug("releasing the agent process of a session nobody is attached to", "session", s.id)
	s.proc.shutdown(shutdownGrace)
	d.setProc(s, nil)
}

// releaseCooling stops, in the background, the processes of the sessions other than s that no client
// wants and no turn uses (those waiting out AgentIdle): a process starting for s takes their place, so a
// user opening session after session keeps at most its live sessions' processes (and the sandbox's
// memory limit is not spent on ones nobody is attached to).
func (d *Driver) releaseCooling(s *agentSession) {
	d.mu.Lock()
	others := make([]*agentSession, 0, len(d.sessions))
	for _, o := range d.sessions {
		if o != s {
			others = append(others, o)
		}
	}
	d.mu.Unlock()
	for _, o := range others {
		o.liveMu.Lock()
		live := o.live != nil
		o.liveMu.Unlock()
		if live && o.isCooling() {
			d.inBackground(func() { d.stopUnwanted(o) })
		}
	}
}

// release ends a turn's hold on the session and arms its idle stop.
func (d *Driver) release(s *agentSession) {
	s.lastUsed = time.Now()
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.proc != nil {
		s.idle = time.AfterFunc(d.cfg.IdleTimeout, func() { d.stopIdle(s) })
	}
	<-s.turn
}

// stopIdle stops a session's process that has had no turn for IdleTimeout.
func (d *Driver) stopIdle(s *agentSession) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return // Close stops the process
	}
	d.background.Add(1)
	d.mu.Unlock()
	defer d.background.Done()
	select {
	case s.turn <- struct{}{}:
	default:
		return // a turn is running
	}
	defer func() { <-s.turn }()
	if s.proc == nil || time.Since(s.lastUsed) < d.cfg.IdleTimeout {
		return
	}
	d.log.Debug("stopping idle agent process", "session", s.id)
	s.proc.shutdown(shutdownGrace)
	d.setProc(s, nil)
}

func (d *Driver) setProc(s *agentSession, p *cliProc) {
	if s.proc != nil && s.proc != p {
		s.proc.close()
	}
	s.proc = p
	s.liveMu.Lock()
	s.live = p
	s.liveMu.Unlock()
}

// start launches the session's CLI: resuming its transcript when there is one, otherwise forking the
// session named by the options (forkSession, or continue: the most recent transcript), otherwise a new
// conversation under the session's id.
//
// pinned says the token allows only opts.Model: the CLI is told to use it for its background and subagent
// calls too, which the model proxy would otherwise refuse.
func (d *Driver) start(s *agentSession, opts wire.SessionOptions, pinned bool, log *slog.Logger) (*cliProc, error) {
	l := launch{SessionID: s.cliID}
	fork := opts.ForkSession && opts.SessionID != ""
	switch {
	case fork && cliSessionID(opts.SessionID) == s.cliID:
		// A fork continues under a new id, which the hub assigns (Turn.SessionID) while the options keep
		// the source's (Options.SessionID). With the same id on both sides there is nothing to fork into,
		// and continuing the source instead would write the fork's turns into it.
		return nil, wire.Errorf(wire.Unavailable, "forkSession needs a new session id for the fork")
	case transcriptPath(d.cfg.Home, s.cliID) != "":
		l.Resume = true
	case fork:
		src := cliSessionID(opts.SessionID)
		if transcriptPath(d.cfg.Home, src) == "" {
			return nil, wire.Errorf(wire.NotFound, "session %s not found", opts.SessionID)
		}
		l.ForkFrom = src
	case opts.Continue && opts.SessionID == "":
		l.ForkFrom = latestTranscript(d.cfg.Home, s.cliID)
	}
	if !s.started {
		// resumeSessionAt cuts the transcript when the session is first resumed here; later processes
		// resume what the conversation has become since.
		l.ResumeAt = opts.ResumeSessionAt
	}

	baseURL, apiKey, err := d.cfg.Endpoint(s.id)
	if err != nil {
		return nil, wire.Wrap(wire.Unavailable, err, "model endpoint unavailable")
	}
	spec := d.spec(cliArgs(opts, l), opts.Env, baseURL, apiKey)
	if pinned && opts.Model != "" {
		for _, k := range pinnedModelEnv {
			spec.Env[k] = opts.Model
		}
	}
	if opts.EnableFileCheckpointing {
		spec.Env["CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING"] = "true"
	}
	p, err := startCLI(d.life, d.sb, spec, opts.MCPServers, log)
	if err != nil {
		if d.cfg.Release != nil {
			d.cfg.Release(s.id, apiKey)
		}
		return nil, wire.Wrap(wire.Unavailable, err, "cannot start the agent")
	}
	if d.cfg.Release != nil {
		go func() {
			<-p.p.Done()
			d.cfg.Release(s.id, apiKey)
		}()
	}
	if d.cfg.Watch != nil {
		wctx, stop := context.WithCancel(context.Background())
		go func() { <-p.p.Done(); stop() }()
		go d.cfg.Watch(wctx, func(cause error) { p.kill(cause) })
	}
	log.Debug("agent process started", "pid", p.p.Pid(), "resume", l.Resume, "fork_from", l.ForkFrom, "resume_at", l.ResumeAt)
	return p, nil
}

// spec is how a CLI process with args starts in the sandbox.
func (d *Driver) spec(args []string, clientEnv map[string]string, baseURL, apiKey string) isolate.ProcessSpec {
	spec := isolate.ProcessSpec{Args: args}
	if d.cfg.Insecure {
		spec.Command = d.cfg.CLIPath
		spec.Env = agentEnv(clientEnv, d.cfg.Env, d.cfg.Home, baseURL, apiKey)
	} else {
		spec.Command = CLIMount
		spec.Env = agentEnv(clientEnv, d.cfg.Env, HomeMount, baseURL, apiKey)
		spec.Binds = []isolate.Bind{
			{Host: d.cfg.CLIPath, Sandbox: CLIMount},
			{Host: d.cfg.Home, Sandbox: HomeMount, Writable: true},
		}
	}
	return spec
}

// userLine converts the client's user message to the CLI's stream-json input line.
func userLine(m wire.ClientMessage, cliID string) ([]byte, error) {
	if m.Type != wire.TypeUser || len(m.Message) == 0 {
		return nil, wire.Errorf(wire.InvalidArgument, "a turn needs a user message")
	}
	in := struct {
		Type            string          `json:"type"`
		Message         json.RawMessage `json:"message"`
		ParentToolUseID *string         `json:"parent_tool_use_id"`
		SessionID       string          `json:"session_id"`
		UUID            string          `json:"uuid,omitempty"`
	}{Type: "user", Message: m.Message, ParentToolUseID: m.ParentToolUseID, SessionID: cliID}
	if isUUID(m.UUID) {
		in.UUID = m.UUID
	}
	b, err := json.Marshal(in) // compacts Message: one line
	if err != nil {
		return nil, wire.Errorf(wire.InvalidArgument, "user message: %v", err)
	}
	return b, nil
}

// drainStale discards output left over from an earlier turn (lines the CLI wrote after its result),
// answering the control requests among them so the CLI never waits for an answer.
func drainStale(p *cliProc, log *slog.Logger) {
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return
			}
			var ev event
			if strictjson.Unmarshal(l, &ev, strictjson.AllowInvalidUTF8) == nil && ev.Type == "control_request" {
				p.control(l, ev, log)
				continue
			}
			log.Debug("discarding agent output written between turns", "bytes", len(l))
		default:
			return
		}
	}
}

// turnRun is one turn being relayed.
type turnRun struct {
	d     *Driver
	s     *agentSession
	p     *cliProc
	log   *slog.Logger
	emit  func([]byte)
	start time.Time
	noise int
}

// event is the part of a CLI line the driver looks at.
type event struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	RequestID string `json:"request_id"`
	Request   struct {
		Subtype string `json:"subtype"`
	} `json:"request"`
}

// relay emits the CLI's events until the turn's result. On interrupt it asks the CLI to stop (a
// control_request) and kills it if it has not ended the turn within InterruptGrace.
func (t *turnRun) relay(ctx context.Context) error {
	var (
		ctxDone   = ctx.Done()
		grace     <-chan time.Time
		exited    = t.p.p.Done()
		drain     <-chan time.Time
		interrupt bool
	)
	for {
		select {
		case line, ok := <-t.p.lines:
			if !ok {
				if interrupt {
					return t.killed(ctx)
				}
				return t.exited(nil)
			}
			done, err := t.handle(line)
			if done {
				if interrupt {
					return ctx.Err()
				}
				return err
			}
		case <-ctxDone:
			ctxDone, interrupt = nil, true
			req := fmt.Sprintf(`{"type":"control_request","request_id":"warren-interrupt-%d","request":{"subtype":"interrupt"}}`, t.d.reqID.Add(1))
			if err := t.p.write([]byte(req), time.Second); err != nil {
				t.log.Debug("interrupt request not delivered; killing the agent", "err", err)
				return t.killed(ctx)
			}
			timer := time.NewTimer(t.d.cfg.InterruptGrace)
			defer timer.Stop()
			grace = timer.C
		case <-grace:
			t.log.Warn("agent did not end the interrupted turn in time; killing it", "grace", t.d.cfg.InterruptGrace)
			return t.killed(ctx)
		case <-exited:
			// Keep reading what the process wrote before it exited, for a bounded time.
			exited = nil
			timer := time.NewTimer(exitDrain)
			defer timer.Stop()
			drain = timer.C
		case <-drain:
			if interrupt {
				return t.killed(ctx)
			}
			return t.exited(nil)
		}
	}
}

// handle relays one line; done reports the turn's result.
func (t *turnRun) handle(line []byte) (done bool, err error) {
	var ev event
	if line[0] != '{' || strictjson.Unmarshal(line, &ev, strictjson.AllowInvalidUTF8) != nil || ev.Type == "" {
		if t.noise < noiseLogs {
			preview := line[:min(len(line), 200)]
			t.log.Warn("agent wrote a line that is not a JSON event; skipped", "bytes", len(line), "preview", string(preview))
		}
		t.noise++
		return false, nil
	}
	switch ev.Type {
	case "control_response":
		return false, nil // the answer to our interrupt
	case "control_request":
		t.p.control(line, ev, t.log)
		return false, nil
	case "result":
		t.emit(t.decorate(line))
		return true, nil
	}
	t.emit(line)
	return false, nil
}

func (t *turnRun) decorate(result []byte) []byte {
	if t.d.cfg.Decorate == nil {
		return result
	}
	return t.d.cfg.Decorate(t.s.id, result)
}

// exited ends a turn whose process died: a synthesized error result, the process forgotten (the next turn
// resumes in a new one), and unavailable.
func (t *turnRun) exited(cause error) error {
	wait := time.NewTimer(exitDrain)
	select {
	case <-t.p.p.Done():
	case <-wait.C:
	}
	wait.Stop()
	reason := t.p.exitReason()
	if cause != nil {
		reason = cause.Error() + ": " + reason
	}
	t.log.Warn("agent process ended during a turn", "reason", reason, "stderr", t.p.stderrTail())
	t.emit(t.decorate(t.synthesize("agent process exited: " + reason)))
	t.d.setProc(t.s, nil)
	return wire.Wrap(wire.Unavailable, fmt.Errorf("%w: %s", ErrExited, reason), "the agent process exited; the next prompt resumes the session")
}

// killed ends an interrupted turn the CLI did not end itself.
func (t *turnRun) killed(ctx context.Context) error {
	t.d.setProc(t.s, nil)
	t.emit(t.decorate(t.synthesize("interrupted")))
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// synthesize builds an error_during_execution result in the CLI's (and the Agent SDK's) shape.
func (t *turnRun) synthesize(msg string) []byte {
	b, _ := json.Marshal(map[string]any{
		"type":            "result",
		"subtype":         "error_during_execution",
		"is_error":        true,
		"session_id":      t.s.cliID,
		"result":          msg,
		"duration_ms":     time.Since(t.start).Milliseconds(),
		"duration_api_ms": 0,
		"num_turns":       0,
		"total_cost_usd":  0,
		"usage": map[string]int{
			"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
		"modelUsage":         map[string]any{},
		"permission_denials": []any{},
		"stop_reason":        nil,
		"errors":             []string{msg}, // the Agent SDK's error results explain themselves here
	})
	return b
}

// processCount is the number of CLI processes (for tests).
func (d *Driver) processCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, s := range d.sessions {
		s.liveMu.Lock()
		if s.live != nil {
			n++
		}
		s.liveMu.Unlock()
	}
	return n
}

// optionsKey fingerprints the options a CLI process is started with, minus how the session was selected
// (those only matter for the first start).
func optionsKey(o wire.SessionOptions) string {
	o.SessionID, o.ResumeSessionAt, o.ForkSession, o.Continue, o.LastSeq = "", "", false, false, nil
	b, _ := json.Marshal(o)
	return string(b)
}
