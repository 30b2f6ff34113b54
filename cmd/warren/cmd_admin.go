package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/wire"
)

func init() {
	register("admin", "manage issuers, keys, quotas, prices and usage through the billing API", runAdmin)
}

const adminUsage = `usage: warren admin <command> [arguments] [flags]

commands:
  issuers ls                       list registered issuers and their default quotas
  issuers put ISS [-name NAME]     register an issuer, or rename it
  keys rotate ISS                  write a new key version of ISS and print its secret (shown once)
  issuers webhook-secret ISS       the secret ISS's backend verifies task webhooks with
  issuers disable ISS              refuse the issuer's tokens on every edge (records, keys and usage stay)
  issuers enable ISS               accept them again
  api-keys ls ISS                  the issuer's API keys (ids and names, never secrets)
  api-keys create ISS [-name NAME] make an API key of ISS: it may manage ISS's quotas and usage, nothing
                                   else; prints its secret (shown once)
  api-keys revoke ISS ID           revoke a key: refused from the next request on
  quota get ISS [-user SUB]        the issuer's default quota, or a user's override
  quota set ISS [-user SUB] [-ai-usd X] [-compute S] [-window W] [-max-sessions N] [-revision R]
                [-max-issuer-sessions N] [-connects-per-minute N] [-issuer-connects-per-minute N]
                [-prompts-per-minute N] [-issuer-prompts-per-minute N]
                [-max-processes N] [-max-memory SIZE] [-cpu-millis N] [-max-tmp SIZE] [-max-workspace SIZE]
                [-max-concurrent-execs N] [-max-stored SIZE]
                [-max-background-processes N] [-max-process-log SIZE] [-max-file-watches N]
                [-max-terminals N] [-max-tasks N] [-max-preview-urls N]
                                   change a quota (flags left out keep their value; a new user override
                                   copies the first four from the issuer's default, a new issuer default
                                   needs them; the others default to "default": the issuer's, the edge's
                                   setting, or the runner's for the sandbox limits; SIZE is bytes or
                                   512MiB, 2GiB, ...)
  quota delete ISS [-user SUB] [-revision R]
                                   delete a quota (a user's override: the issuer's default applies again);
                                   at -revision, else at the revision read just before
  usage [-iss ISS] [-user SUB] [-from T] [-to T] [-group-by user|day|model] [-csv]
                                   usage and cost (default: this UTC month, by user)
  prices ls                        the model price table, USD per million tokens
  prices set MODEL [-input X] [-output X] [-cache-read X] [-cache-creation X]
                                   override a model's prices, USD per million tokens
  prices delete MODEL              remove a model's override (its built-in price applies again)
  templates ls [-issuer ISS] [-name NAME]
                                   the versions of a workspace template (warren deploy), newest first
  templates use VERSION [-issuer ISS] [-name NAME]
                                   make an older version current again (as a new version)
  templates rm [-issuer ISS] [-name NAME]
                                   delete a template and every version (new sandboxes start empty)

Flags may come before or after the arguments. Every command takes:
`

// adminFlags are the flags of every admin command: which billing API, with which key, and how to print.
type adminFlags struct {
	url     string
	key     string
	dataDir string
	json    bool
}

// newAdminFlags starts from $WARREN_BILLING_URL (else $WARREN_URL) and $WARREN_ADMIN_KEY.
func newAdminFlags() *adminFlags {
	af := &adminFlags{url: os.Getenv("WARREN_BILLING_URL"), key: os.Getenv("WARREN_ADMIN_KEY"), dataDir: env.DataDir()}
	if af.url == "" {
		af.url = os.Getenv("WARREN_URL")
	}
	if af.url == "" {
		af.url = "http://127.0.0.1:8080"
	}
	af.url = withScheme(af.url)
	return af
}

// register defines the common flags on fs. They are Func flags so that defining them on the group's and the
// command's flag sets keeps what was parsed earlier, and so that -h never prints the key.
func (af *adminFlags) register(fs *flag.FlagSet) {
	fs.Func("url", "the billing API's base `URL` (default $WARREN_BILLING_URL, $WARREN_URL or http://127.0.0.1:8080)", func(s string) error {
		af.url = withScheme(s)
		return nil
	})
	fs.Func("admin-key", "the admin `key` (default $WARREN_ADMIN_KEY, else the one in the data dir's "+file.DefaultFileName+")", func(s string) error {
		af.key = s
		return nil
	})
	fs.Func("data-dir", "the `dir` warren dev keeps its state in, where the admin key is looked up ($WARREN_DATA_DIR, default ./.warren)", func(s string) error {
		af.dataDir = s
		return nil
	})
	fs.BoolFunc("json", "print JSON for scripts instead of tables", func(s string) error {
		b, err := strconv.ParseBool(s)
		af.json = b
		return err
	})
}

// flagSet is a command's flag set with the common flags on it.
func (af *adminFlags) flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("warren admin "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren admin "+name+" [arguments] [flags]\n\nSee 'warren admin -h' for the arguments.")
	af.register(fs)
	return fs
}

// adminCommand runs one command with its arguments (after the command's words).
type adminCommand func(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error

var adminCommands = map[string]adminCommand{
	"issuers ls":    adminIssuersList,
	"issuers put":   adminIssuersPut,
	"keys rotate":   adminKeysRotate,
	"quota get":     adminQuotaGet,
	"quota set":     adminQuotaSet,
	"quota delete":  adminQuotaDelete,
	"usage":         adminUsageReport,
	"prices ls":     adminPricesList,
	"prices set":    adminPricesSet,
	"prices delete": adminPricesDelete,

	"issuers disable": adminIssuersDisable,
	"issuers enable":  adminIssuersEnable,
	"api-keys ls":     adminAPIKeysList,
	"api-keys create": adminAPIKeysCreate,
	"api-keys revoke": adminAPIKeysRevoke,
}

func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	af := newAdminFlags()
	fs := flag.NewFlagSet("warren admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	af.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, help.Wrap(adminUsage, ""))
		help.PrintDefaults(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("missing command")
	}
	name := rest[0]
	if name == "help" {
		fs.Usage()
		return nil
	}
	if name != "usage" && len(rest) > 1 {
		name += " " + rest[1]
	}
	run, ok := adminCommands[name]
	if !ok {
		fs.Usage()
		return fmt.Errorf("unknown command %q", strings.Join(rest[:min(2, len(rest))], " "))
	}
	return asAdminError(run(ctx, af, rest[len(strings.Fields(name)):], stdout, stderr))
}

// wantArgs checks the positional arguments' count and names them in the error.
func wantArgs(pos []string, names ...string) error {
	if len(pos) < len(names) {
		return fmt.Errorf("missing %s", strings.Join(names[len(pos):], " "))
	}
	if len(pos) > len(names) {
		return fmt.Errorf("unexpected arguments %q", pos[len(names):])
	}
	return nil
}

func adminIssuersList(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("issuers ls", stderr)
	_, c, err := af.start(ctx, fs, args)
	if err != nil {
		return err
	}
	issuers, err := c.ListIssuers(ctx)
	if err != nil {
		return err
	}
	list := struct {
		Issuers []billing.Issuer `json:"issuers"`
	}{issuers}
	if af.json {
		return printJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ISS\tNAME\tCREATED\tAI\tCOMPUTE\tSESSIONS\tREVISION")
	for _, iss := range list.Issuers {
		ai, compute, sessions, rev := "-", "-", "-", "-"
		if q := iss.Quota; q != nil {
			ai, compute, sessions, rev = usdLimit(q.AIMicros)+" per "+string(q.Window), secondsLimit(q.ComputeSeconds), countLimit(q.MaxConcurrentSessions), strconv.FormatInt(q.Revision, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", iss.ID, iss.Name, iss.Created.UTC().Format(time.DateTime), ai, compute, sessions, rev)
	}
	return tw.Flush()
}

func adminIssuersPut(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("issuers put", stderr)
	name := fs.String("name", "", "display name (default: keep the current one)")
	pos, c, err := af.start(ctx, fs, args, "ISS")
	if err != nil {
		return err
	}
	cur, err := c.GetIssuer(ctx, pos[0])
	existed := err == nil
	if err != nil && !adminclient.IsCode(err, wire.NotFound) {
		return err
	}
	newName := cur.Name
	if flagSet(fs, "name") {
		newName = *name
	}
	iss, err := c.PutIssuer(ctx, pos[0], newName)
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, iss)
	}
	if existed {
		fmt.Fprintf(stdout, "issuer %s updated (name %q)\n", iss.ID, iss.Name)
		return nil
	}
	fmt.Fprintf(stdout, "issuer %s registered (name %q)\nnext: `warren admin keys rotate %s` writes its signing key; `warren admin quota set %s ...` its default quota\n",
		iss.ID, iss.Name, iss.ID, iss.ID)
	return nil
}

func adminKeysRotate(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("keys rotate", stderr)
	pos, c, err := af.start(ctx, fs, args, "ISS")
	if err != nil {
		return err
	}
	key, err := c.RotateKey(ctx, pos[0])
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, key)
	}
	fmt.Fprintf(stdout, "kid     %s\nsecret  %s\n", key.KeyID, key.Secret)
	fmt.Fprintf(stderr, "The secret is shown only this once: store it in your backend's secret manager. Give it to your JWT\n"+
		"library as is, a string (HS256 over its UTF-8 bytes; never base64-decode it), and put kid %q in the header.\n"+
		"To try it: %s=SECRET warren token -issuer %s -kid %s -user USER (README: Minting tokens).\n",
		key.KeyID, issuerSecretEnv, pos[0], key.KeyID)
	return nil
}

func adminQuotaGet(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("quota get", stderr)
	user := fs.String("user", "", "the end user (`SUB`) whose override to show")
	pos, c, err := af.start(ctx, fs, args, "ISS")
	if err != nil {
		return err
	}
	q, err := c.GetQuota(ctx, billing.QuotaKey{Issuer: pos[0], User: *user})
	fallback := false
	if *user != "" && adminclient.IsCode(err, wire.NotFound) {
		// The user has no override: show what applies instead, the issuer's default.
		fallback = true
		q, err = c.GetQuota(ctx, billing.QuotaKey{Issuer: pos[0]})
	}
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, q)
	}
	if fallback {
		fmt.Fprintf(stdout, "user %s has no quota of its own; the issuer's default applies:\n", *user)
	}
	printQuota(stdout, q)
	return nil
}

func printQuota(w io.Writer, q adminclient.Quota) {
	who := q.Issuer + " (issuer default)"
	if q.User != "" {
		who = q.Issuer + "/" + q.User
	}
	per := " per " + string(q.Window)
	if q.Window == billing.Lifetime {
		per = " in total"
	}
	fmt.Fprintf(w, "quota of %s, revision %d\n", who, q.Revision)
	line := func(label, value string) { fmt.Fprintf(w, "  %-16s %s\n", label, value) }
	line("ai", usdLimit(q.AIMicros)+per)
	line("compute", secondsLimit(q.ComputeSeconds)+per)
	line("sessions", countLimit(q.MaxConcurrentSessions)+" at once")
	// 0 is not set: an override falls back to the issuer's default, that to the edge's configuration.
	notSet := "edge default"
	if q.User != "" {
		notSet = "issuer default"
	} else {
		line("issuer sessions", optionalLimit(q.MaxIssuerSessions, " at once, all users", "no cap"))
	}
	line("connects", optionalLimit(q.ConnectsPerMinute, " per minute", notSet))
	if q.User == "" {
		line("issuer connects", optionalLimit(q.IssuerConnectsPerMinute, " per minute, all users", notSet))
	}
	line("prompts", optionalLimit(q.PromptsPerMinute, " per minute", notSet))
	if q.User == "" {
		line("issuer prompts", optionalLimit(q.IssuerPromptsPerMinute, " per minute, all users", notSet))
		notSet = "runner default"
	}
	// The sandbox's hard limits.
	line("processes", optionalLimit(q.MaxProcesses, " at once", notSet))
	line("memory", optionalSize(q.MaxMemoryBytes, "", notSet))
	line("cpu", optionalLimit(q.CPUMillis, " millicores", notSet))
	line("tmp", optionalSize(q.MaxTmpBytes, " per command", notSet))
	line("workspace", optionalSize(q.MaxWorkspaceBytes, "", notSet))
	line("execs", optionalLimit(q.MaxConcurrentExecs, " at once", notSet))
	line("stored", optionalSize(q.MaxStoredBytes, " of snapshots", notSet))
	// The per-user limits that were runner and edge flags; the process log is a size.
	for _, l := range []struct {
		label, suffix string
		v             int64
	}{
		{"bg processes", " at once", q.MaxBackgroundProcesses}, {"file watches", " at once", q.MaxFileWatches},
		{"terminals", " at once", q.MaxTerminals}, {"tasks", " queued or running", q.MaxTasks},
		{"preview urls", " live", q.MaxPreviewURLs},
	} {
		line(l.label, optionalLimit(l.v, l.suffix, notSet))
	}
	line("process log", optionalSize(q.MaxProcessLogBytes, " per process", notSet))
}

// optionalSize is optionalLimit for a size in bytes, shown in the largest binary unit that divides it.
func optionalSize(v int64, suffix, notSet string) string {
	if v <= 0 {
		return optionalLimit(v, "", notSet)
	}
	return byteSize(v) + suffix
}

// byteSize formats n bytes exactly: in TiB, GiB, MiB or KiB when one divides it, else in bytes.
func byteSize(n int64) string {
	for _, u := range sizeUnits {
		if u.binary && n%u.bytes == 0 {
			return strconv.FormatInt(n/u.bytes, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// optionalLimit shows an admission field of a quota: unlimited, the value with its unit, or what applies
// when it is not set (0).
func optionalLimit(v int64, unit, notSet string) string {
	switch {
	case v < 0:
		return "unlimited"
	case v == 0:
		return notSet
	}
	return strconv.FormatInt(v, 10) + unit
}

// quotaFlag is an optional flag of quota set: an admission field or sandbox limit, which a flag left out
// keeps (never counted as missing).
type quotaFlag struct {
	name, usage string
	field       func(*billing.Quota) *int64
	parse       func(string) (int64, error)
}

var quotaFlags = []quotaFlag{
	{"max-issuer-sessions", "sessions all the issuer's users may run at once (`N`), unlimited, or default (no cap); issuer default only",
		func(q *billing.Quota) *int64 { return &q.MaxIssuerSessions }, parseOptionalLimit},
	{"connects-per-minute", "agent connects per minute of each user (`N`), unlimited, or default (the issuer's, else the edge's)",
		func(q *billing.Quota) *int64 { return &q.ConnectsPerMinute }, parseOptionalLimit},
	{"issuer-connects-per-minute", "agent connects per minute of all the issuer's users (`N`), unlimited, or default (the edge's); issuer default only",
		func(q *billing.Quota) *int64 { return &q.IssuerConnectsPerMinute }, parseOptionalLimit},
	{"prompts-per-minute", "prompts per minute of each user (`N`), unlimited, or default (the issuer's, else the edge's)",
		func(q *billing.Quota) *int64 { return &q.PromptsPerMinute }, parseOptionalLimit},
	{"issuer-prompts-per-minute", "prompts per minute of all the issuer's users (`N`), unlimited, or default (the edge's); issuer default only",
		func(q *billing.Quota) *int64 { return &q.IssuerPromptsPerMinute }, parseOptionalLimit},
	{"max-processes", "processes and threads alive at once in each user's sandbox (`N`, at least 8), unlimited, or default (the issuer's, else the runner's)",
		func(q *billing.Quota) *int64 { return &q.MaxProcesses }, parseOptionalLimit},
	{"max-memory", "memory of each user's sandbox (`SIZE`: bytes, 512MiB, 2GiB; at least 16MiB), unlimited, or default (the issuer's, else the runner's)",
		func(q *billing.Quota) *int64 { return &q.MaxMemoryBytes }, parseOptionalSize},
	{"cpu-millis", "CPU of each user's sandbox in thousandths of a core (`N`, 1000: one core; at least 10), unlimited, or default (the issuer's, else the runner's)",
		func(q *billing.Quota) *int64 { return &q.CPUMillis }, parseOptionalLimit},
	{"max-tmp", "private /tmp of each command (`SIZE`, at least 1MiB), unlimited, or default (the issuer's, else the runner's)",
		func(q *billing.Quota) *int64 { return &q.MaxTmpBytes }, parseOptionalSize},
	{"max-workspace", "bytes under each user's /workspace (`SIZE`, at least 1MiB), unlimited, or default (the issuer's, else the runner's)",
		func(q *billing.Quota) *int64 { return &q.MaxWorkspaceBytes }, parseOptionalSize},
	{"max-concurrent-execs", "commands running at once in each user's sandbox (`N`), unlimited, or default (the issuer's, else the runner's)",
		func(q *billing.Quota) *int64 { return &q.MaxConcurrentExecs }, parseOptionalLimit},
	{"max-stored", "bytes each user's snapshots keep in the blob store (`SIZE`, at least 1MiB), unlimited, or default (the issuer's, else the runner's)",
		func(q *billing.Quota) *int64 { return &q.MaxStoredBytes }, parseOptionalSize},
	{"max-background-processes", "background processes running at once in each user's sandbox (`N`), unlimited (the runner's ceiling, 1024), or default (the issuer's, else the runner's -max-processes)",
		func(q *billing.Quota) *int64 { return &q.MaxBackgroundProcesses }, parseOptionalLimit},
	{"max-process-log", "output kept of each background process (`SIZE`, 4KiB to 64MiB; never unlimited: it is held in the runner's memory), or default (the issuer's, else the runner's -process-log-bytes)",
		func(q *billing.Quota) *int64 { return &q.MaxProcessLogBytes }, parseOptionalSize},
	{"max-file-watches", "file watches at once in each user's sandbox (`N`), unlimited (the runner's ceiling, 64), or default (the issuer's, else the runner's 8)",
		func(q *billing.Quota) *int64 { return &q.MaxFileWatches }, parseOptionalLimit},
	{"max-terminals", "terminals running at once in each user's sandbox (`N`), unlimited (the runner's ceiling, 64), or default (the issuer's, else the runner's 8)",
		func(q *billing.Quota) *int64 { return &q.MaxTerminals }, parseOptionalLimit},
	{"max-tasks", "one-shot tasks each user may have queued or running (`N`), unlimited (the runner's ceiling, 256, or its -max-tasks if higher), or default (the issuer's, else the runner's -max-tasks)",
		func(q *billing.Quota) *int64 { return &q.MaxTasks }, parseOptionalLimit},
	{"max-preview-urls", "live preview URLs of each user (`N`), unlimited (the edge's ceiling, 1000, or its -preview-max-per-user if higher), or default (the issuer's, else the edge's -preview-max-per-user)",
		func(q *billing.Quota) *int64 { return &q.MaxPreviewURLs }, parseOptionalLimit},
}

// budgetFlag is a flag of quota set a new quota needs: the budget and its window.
type budgetFlag struct {
	name, usage string
	apply       func(q *billing.Quota, v string) error
}

var budgetFlags = []budgetFlag{
	{"ai-usd", "model budget per window in `USD`, or unlimited", func(q *billing.Quota, v string) (err error) { q.AIMicros, err = parseUSDLimit(v); return }},
	{"compute", "compute budget per window in `seconds` (or a duration: 2h), or unlimited", func(q *billing.Quota, v string) (err error) { q.ComputeSeconds, err = parseSecondsLimit(v); return }},
	{"window", "budget `window`: hour, day, week, month or lifetime", func(q *billing.Quota, v string) error {
		if q.Window = billing.Window(v); !q.Window.Valid() {
			return errors.New("want hour, day, week, month or lifetime")
		}
		return nil
	}},
	{"max-sessions", "sessions one user may run at once (`N`), or unlimited", func(q *billing.Quota, v string) (err error) {
		q.MaxConcurrentSessions, err = parseCountLimit(v)
		return
	}},
}

// setQuotaFlags writes the quota flags given on fs into q: how many optional ones were, and which budget
// flags were missing.
func setQuotaFlags(fs *flag.FlagSet, q *billing.Quota) (optional int, missing []string, err error) {
	for _, f := range quotaFlags {
		if !flagSet(fs, f.name) {
			continue
		}
		optional++
		v := fs.Lookup(f.name).Value.String()
		n, err := f.parse(v)
		if err != nil {
			return 0, nil, fmt.Errorf("-%s %q: %w", f.name, v, err)
		}
		*f.field(q) = n
	}
	for _, f := range budgetFlags {
		if !flagSet(fs, f.name) {
			missing = append(missing, "-"+f.name)
			continue
		}
		v := fs.Lookup(f.name).Value.String()
		if err := f.apply(q, v); err != nil {
			return 0, nil, fmt.Errorf("-%s %q: %w", f.name, v, err)
		}
	}
	return optional, missing, nil
}

func adminQuotaSet(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("quota set", stderr)
	user := fs.String("user", "", "set the override of this end user (`SUB`) instead of the issuer's default")
	for _, f := range budgetFlags {
		fs.String(f.name, "", f.usage)
	}
	for _, f := range quotaFlags {
		fs.String(f.name, "", f.usage)
	}
	revision := fs.Int64("revision", -1, "the `revision` you read (default: the current one, read just before writing)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, "ISS"); err != nil {
		return err
	}
	c, err := af.client(ctx)
	if err != nil {
		return err
	}
	// Start from the current quota, so flags left out keep their value.
	key := billing.QuotaKey{Issuer: pos[0], User: *user}
	cur, err := c.GetQuota(ctx, key)
	exists := err == nil
	if err != nil && !adminclient.IsCode(err, wire.NotFound) {
		return err
	}
	q := cur.Quota
	if !exists && *user != "" {
		// A new override starts with the issuer default's budget and window (a copy); everything else it
		// leaves unset falls back to the issuer's default as that changes.
		if def, err := c.GetQuota(ctx, billing.QuotaKey{Issuer: pos[0]}); err == nil {
			q.AIMicros, q.ComputeSeconds, q.Window = def.AIMicros, def.ComputeSeconds, def.Window
			q.MaxConcurrentSessions, exists = def.MaxConcurrentSessions, true
		} else if !adminclient.IsCode(err, wire.NotFound) {
			return err
		}
	}
	optional, missing, err := setQuotaFlags(fs, &q)
	switch {
	case err != nil:
		return err
	case !exists && len(missing) > 0:
		return fmt.Errorf("%s has no quota yet: a new one needs %s", strings.TrimPrefix(adminclient.QuotaPath(key), "/v1/quotas/"), strings.Join(missing, ", "))
	case len(missing) == 4 && optional == 0:
		return errors.New("nothing to set: pass -ai-usd, -compute, -window, -max-sessions or a rate, issuer cap or sandbox limit flag")
	}
	expected := cur.Revision
	if flagSet(fs, "revision") {
		if *revision < 0 {
			return errors.New("-revision must not be negative")
		}
		expected = *revision
	}
	stored, err := c.PutQuota(ctx, key, q, expected)
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, stored)
	}
	printQuota(stdout, stored)
	return nil
}

func adminUsageReport(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("usage", stderr)
	iss := fs.String("iss", "", "only this issuer")
	user := fs.String("user", "", "only this end user of -iss")
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	from := fs.String("from", month.Format(time.DateOnly), "start, inclusive: a date (UTC) or RFC 3339 time")
	to := fs.String("to", month.AddDate(0, 1, 0).Format(time.DateOnly), "end, exclusive: a date (UTC) or RFC 3339 time")
	groupBy := fs.String("group-by", "user", "user, day (UTC) or model")
	asCSV := fs.Bool("csv", false, "print CSV (streamed from the API)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos); err != nil {
		return err
	}
	if *user != "" && *iss == "" {
		return errors.New("-user needs -iss: users are named within their issuer")
	}
	c, err := af.client(ctx)
	if err != nil {
		return err
	}
	q := adminclient.UsageQuery{Issuer: *iss, User: *user, From: *from, To: *to, GroupBy: billing.GroupBy(*groupBy)}
	if *asCSV {
		return c.UsageCSV(ctx, q, stdout)
	}
	report, err := c.Usage(ctx, q, 0) // every page, collected: one report
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, report)
	}
	col := string(report.GroupBy)
	if col == "user" {
		col = "sub"
	}
	fmt.Fprintf(stdout, "usage from %s to %s by %s\n", report.From.Format(time.RFC3339), report.To.Format(time.RFC3339), report.GroupBy)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ISS\t%s\tAI USD\tCOMPUTE\tEVENTS\n", strings.ToUpper(col))
	for _, r := range report.Rows {
		key := adminclient.UsageKey(r)
		if col == "model" && key == "" {
			key = "(compute)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", r.Issuer, key, usd(r.AIMicros), seconds(r.ComputeSeconds), r.Events)
	}
	t := report.Totals
	fmt.Fprintf(tw, "TOTAL\t\t%s\t%s\t%d\n", usd(t.AIMicros), seconds(t.ComputeSeconds), t.Events)
	return tw.Flush()
}

func adminPricesList(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("prices ls", stderr)
	_, c, err := af.start(ctx, fs, args)
	if err != nil {
		return err
	}
	table, err := c.ListPrices(ctx)
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, table)
	}
	fmt.Fprintln(stdout, "USD per million tokens; a model is charged at its longest matching name prefix, else at (default)")
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tINPUT\tOUTPUT\tCACHE READ\tCACHE CREATION\tSOURCE")
	row := func(name string, p billing.Price, source string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, usd(p.Input), usd(p.Output), usd(p.CacheRead), usd(p.CacheCreation), source)
	}
	for _, m := range table.Models {
		source := "built-in"
		if m.Custom {
			source = "custom"
		}
		row(m.Model, m.Price, source)
	}
	row("(default)", table.Default, "built-in")
	return tw.Flush()
}

func adminPricesSet(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("prices set", stderr)
	for _, name := range []string{"input", "output", "cache-read", "cache-creation"} {
		fs.String(name, "", "`USD` per million "+strings.ReplaceAll(name, "-", " ")+" tokens (default: the model's current price)")
	}
	pos, c, err := af.start(ctx, fs, args, "MODEL")
	if err != nil {
		return err
	}
	cur, err := c.GetPrice(ctx, pos[0])
	if err != nil {
		return err
	}
	p := cur.Price
	changed := false
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"input", &p.Input}, {"output", &p.Output}, {"cache-read", &p.CacheRead}, {"cache-creation", &p.CacheCreation}} {
		if !flagSet(fs, f.name) {
			continue
		}
		changed = true
		v := fs.Lookup(f.name).Value.String()
		n, err := parseUSD(v)
		if err != nil {
			return fmt.Errorf("-%s %q: %w", f.name, v, err)
		}
		*f.dst = n
	}
	if !changed {
		return errors.New("nothing to set: pass -input, -output, -cache-read or -cache-creation")
	}
	stored, err := c.PutPrice(ctx, pos[0], p)
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, struct {
			Model string        `json:"model"`
			Price billing.Price `json:"price"`
		}{stored.Model, stored.Price})
	}
	fmt.Fprintf(stdout, "%s now costs, in USD per million tokens: input %s, output %s, cache read %s, cache creation %s\n",
		stored.Model, usd(stored.Price.Input), usd(stored.Price.Output), usd(stored.Price.CacheRead), usd(stored.Price.CacheCreation))
	return nil
}

func adminQuotaDelete(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("quota delete", stderr)
	user := fs.String("user", "", "the end user (`SUB`) whose override to delete")
	rev := fs.Int64("revision", 0, "delete only at this `revision` (default: the one read just before)")
	pos, c, err := af.start(ctx, fs, args, "ISS")
	if err != nil {
		return err
	}
	key := billing.QuotaKey{Issuer: pos[0], User: *user}
	if *rev == 0 {
		cur, err := c.GetQuota(ctx, key)
		if err != nil {
			return err
		}
		*rev = cur.Revision
	}
	if err := c.DeleteQuota(ctx, key, *rev); err != nil {
		return err
	}
	what := "the default quota of " + pos[0]
	if *user != "" {
		what = fmt.Sprintf("the quota of %s/%s (the issuer's default applies to it again)", pos[0], *user)
	}
	fmt.Fprintf(stdout, "deleted %s, revision %d\n", what, *rev)
	return nil
}

func adminPricesDelete(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("prices delete", stderr)
	pos, c, err := af.start(ctx, fs, args, "MODEL")
	if err != nil {
		return err
	}
	if err := c.DeletePrice(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted the price override of %s\n", pos[0])
	return nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func isUnlimited(s string) bool { return s == "unlimited" || s == "-1" }

// parseUSD reads a non-negative USD amount into microdollars.
func parseUSD(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > math.MaxInt64/1e6 {
		return 0, errors.New("want a non-negative amount in USD")
	}
	return int64(math.Round(f * 1e6)), nil
}

func parseUSDLimit(s string) (int64, error) {
	if isUnlimited(s) {
		return billing.Unlimited, nil
	}
	return parseUSD(s)
}

func parseSecondsLimit(s string) (int64, error) {
	if isUnlimited(s) {
		return billing.Unlimited, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return int64(d / time.Second), nil
	}
	return 0, errors.New("want seconds, a duration such as 2h, or unlimited")
}

func parseCountLimit(s string) (int64, error) {
	if isUnlimited(s) {
		return billing.Unlimited, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a non-negative count or unlimited")
	}
	return n, nil
}

// parseOptionalLimit reads an admission field of a quota: "default" is 0 (not set), "unlimited" or -1 is
// unlimited, else a positive count. A literal 0 is refused: it would read as "none allowed" but means
// "not set".
func parseOptionalLimit(s string) (int64, error) {
	switch {
	case s == "default":
		return 0, nil
	case isUnlimited(s):
		return billing.Unlimited, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err == nil && n > 0:
		return n, nil
	case err == nil && n == 0:
		return 0, errors.New("0 is not a limit here: pass default to use the default, or a positive count")
	}
	return 0, errors.New("want a positive count, unlimited, or default")
}

// sizeUnits are the units parseSize reads and byteSize writes, largest first.
var sizeUnits = []struct {
	name   string
	bytes  int64
	binary bool
}{
	{"TiB", 1 << 40, true}, {"GiB", 1 << 30, true}, {"MiB", 1 << 20, true}, {"KiB", 1 << 10, true},
	{"TB", 1e12, false}, {"GB", 1e9, false}, {"MB", 1e6, false}, {"KB", 1e3, false}, {"B", 1, false},
}

// parseSize reads a positive number of bytes: an integer, or a number with a unit (512MiB, 1.5GiB, 2GB;
// the unit in any case, a space before it allowed). Fractions are rounded to the byte.
func parseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if len(num) > len(u.name) && strings.EqualFold(num[len(num)-len(u.name):], u.name) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.name)]), u.bytes
			break
		}
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil && n > 0 && n <= math.MaxInt64/mult {
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f*float64(mult) >= math.MaxInt64 || math.Round(f*float64(mult)) < 1 {
		return 0, errors.New("want a positive size: bytes, or a number with a unit such as 512MiB or 2GiB")
	}
	return int64(math.Round(f * float64(mult))), nil
}

// parseOptionalSize is parseOptionalLimit for a size (parseSize).
func parseOptionalSize(s string) (int64, error) {
	switch {
	case s == "default":
		return 0, nil
	case isUnlimited(s):
		return billing.Unlimited, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n == 0 {
		return 0, errors.New("0 is not a limit here: pass default to use the default, or a positive size")
	}
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%w, unlimited, or default", err)
	}
	return n, nil
}

// usd formats microdollars as USD with at least two decimals and no rounding: 0.30, 3.75, 0.0001.
func usd(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	frac := strings.TrimRight(fmt.Sprintf("%06d", micros%1_000_000), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%s", sign, micros/1_000_000, frac)
}

func usdLimit(micros int64) string {
	if micros < 0 {
		return "unlimited"
	}
	return "$" + usd(micros)
}

func seconds(s int64) string {
	if s >= 60 {
		return fmt.Sprintf("%ds (%s)", s, time.Duration(s)*time.Second)
	}
	return fmt.Sprintf("%ds", s)
}

func secondsLimit(s int64) string {
	if s < 0 {
		return "unlimited"
	}
	return seconds(s)
}

func countLimit(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10)
}

// start is every subcommand's preamble: parse flags and positional arguments, check the required ones
// (names), and make the client.
func (af *adminFlags) start(ctx context.Context, fs *flag.FlagSet, args []string, names ...string) ([]string, *adminclient.Client, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if err := wantArgs(pos, names...); err != nil {
		return nil, nil, err
	}
	c, err := af.client(ctx)
	return pos, c, err
}

// client resolves the key (-admin-key, $WARREN_ADMIN_KEY, else the data dir's secrets file) and the URL.
func (af *adminFlags) client(ctx context.Context) (*adminclient.Client, error) {
	key := af.key
	if key == "" {
		path := filepath.Join(af.dataDir, file.DefaultFileName)
		if _, err := os.Stat(path); err == nil {
			store, err := file.Open(path)
			if err != nil {
				return nil, fmt.Errorf("read the admin key: %w", err)
			}
			keys, err := store.AdminKeys(ctx)
			if err != nil {
				return nil, fmt.Errorf("read the admin key: %w", err)
			}
			if len(keys) > 0 {
				key = keys[0]
			}
		}
	}
	c, err := adminclient.New(adminclient.Config{URL: af.url, Key: key, UserAgent: "warren-cli/" + version})
	switch {
	case errors.Is(err, adminclient.ErrBadURL):
		return nil, badURL(af.url)
	case errors.Is(err, adminclient.ErrNoKey):
		return nil, fmt.Errorf("no admin key: pass -admin-key or set WARREN_ADMIN_KEY (warren dev keeps one in %s)",
			filepath.Join(af.dataDir, file.DefaultFileName))
	case err != nil:
		return nil, err
	}
	return c, nil
}

// asAdminError shows a failed call of the billing API as an adminError; other errors pass as they are.
func asAdminError(err error) error {
	var ce *adminclient.Error
	var shown adminError
	if errors.As(err, &ce) && !errors.As(err, &shown) {
		return adminError{err}
	}
	return err
}

// adminError is an error of the billing API as the CLI shows it; the original stays underneath.
type adminError struct{ err error }

func (e adminError) Unwrap() error { return e.err }

// Error is the CLI's sentence for the error, with the request id the billing API logged it under, when
// it answered.
func (e adminError) Error() string {
	var ce *adminclient.Error
	var te *adminclient.TimeoutError
	switch {
	case errors.As(e.err, &te) && errors.As(e.err, &ce):
		return fmt.Sprintf("the billing API did not answer within %s (request id %s)", te.After, ce.RequestID)
	case errors.As(e.err, &ce) && ce.Status != 0:
		return e.describe() + " (request id " + ce.RequestID + ")"
	}
	return e.describe()
}

func (e adminError) describe() string {
	var we *wire.Error
	if errors.As(e.err, &we) {
		m := we.Message
		switch we.Code {
		case wire.Unauthenticated:
			return fmt.Sprintf("the admin key was rejected: %s (pass -admin-key or set WARREN_ADMIN_KEY; warren dev keeps one in its data dir's %s)", m, file.DefaultFileName)
		case wire.Conflict:
			return fmt.Sprintf("conflict: %s (someone changed it meanwhile: check with `warren admin quota get`, then retry)", m)
		case wire.NotFound:
			return "not found: " + m
		case wire.InvalidArgument:
			return "invalid request: " + m
		case wire.PayloadTooLarge:
			return "too large: " + m
		case wire.Unavailable:
			return "the billing service is unavailable: " + m
		case wire.Internal:
			return fmt.Sprintf("the billing API failed: %s (its log has the cause)", m)
		}
		return fmt.Sprintf("%s: %s", we.Code, m)
	}
	if errors.Is(e.err, syscall.ECONNREFUSED) {
		var ue *url.Error
		where := "the billing API"
		if errors.As(e.err, &ue) {
			if u, err := url.Parse(ue.URL); err == nil {
				where += " at " + u.Scheme + "://" + u.Host
			}
		}
		return fmt.Sprintf("cannot reach %s — is `warren dev` running? (or pass -url or set WARREN_BILLING_URL)", where)
	}
	return describeError(e.err)
}

func adminAPIKeysList(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("api-keys ls", stderr)
	pos, c, err := af.start(ctx, fs, args, "ISS")
	if err != nil {
		return err
	}
	keys, err := c.ListAPIKeys(ctx, pos[0])
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, struct {
			Keys []billing.APIKey `json:"keys"`
		}{keys})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k.ID, k.Name, k.Created.UTC().Format(time.DateTime))
	}
	return tw.Flush()
}

func adminAPIKeysCreate(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("api-keys create", stderr)
	name := fs.String("name", "", "what the key is for (at most 256 bytes)")
	pos, c, err := af.start(ctx, fs, args, "ISS")
	if err != nil {
		return err
	}
	k, err := c.CreateAPIKey(ctx, pos[0], *name)
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, k)
	}
	fmt.Fprintf(stdout, "id      %s\nsecret  %s\n", k.ID, k.Secret)
	fmt.Fprintf(stderr, "The secret is shown only this once; the billing API keeps its hash. It may manage issuer %s's\n"+
		"quotas and usage and nothing else: send it as the admin key (-admin-key or WARREN_ADMIN_KEY).\n"+
		"Revoke it with: warren admin api-keys revoke %s %s\n", pos[0], pos[0], k.ID)
	return nil
}

func adminAPIKeysRevoke(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("api-keys revoke", stderr)
	pos, c, err := af.start(ctx, fs, args, "ISS", "ID")
	if err != nil {
		return err
	}
	if err := c.RevokeAPIKey(ctx, pos[0], pos[1]); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, map[string]any{"iss": pos[0], "id": pos[1], "revoked": true})
	}
	fmt.Fprintf(stdout, "api key %s of %s revoked\n", pos[1], pos[0])
	return nil
}

func adminIssuersDisable(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	return adminIssuersSetDisabled(ctx, af, args, stdout, stderr, true)
}

func adminIssuersEnable(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	return adminIssuersSetDisabled(ctx, af, args, stdout, stderr, false)
}

func adminIssuersSetDisabled(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer, disabled bool) error {
	name := map[bool]string{true: "issuers disable", false: "issuers enable"}[disabled]
	pos, c, err := af.start(ctx, af.flagSet(name, stderr), args, "ISS")
	if err != nil {
		return err
	}
	iss, err := c.SetIssuerDisabled(ctx, pos[0], disabled)
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, iss)
	}
	if disabled {
		fmt.Fprintf(stdout, "issuer %s disabled: every edge refuses its tokens (sandboxes already running are not stopped)\n", iss.ID)
		return nil
	}
	fmt.Fprintf(stdout, "issuer %s enabled\n", iss.ID)
	return nil
}
