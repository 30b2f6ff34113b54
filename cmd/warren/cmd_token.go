package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
)

func init() {
	register("token", "mint an end-user JWT (dev issuer secret from the data dir, or -secret-file / $"+issuerSecretEnv+")", runToken)
}

// issuerSecretEnv holds an issuer secret for `warren token` when -secret-file is not given. A secret is never
// a flag value: command lines are visible to every user of the machine and land in shell history.
const issuerSecretEnv = "WARREN_ISSUER_SECRET"

// tokenFlags are warren token's flags.
type tokenFlags struct {
	issuer, user, window, windowStart, aud, dataDir, secretFile, kid string
	model, tools, blocked, tmpl                                      string
	aiUSD                                                            float64
	compute                                                          int64
	ttl                                                              time.Duration
	maxTurns                                                         int
}

func (f *tokenFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.issuer, "issuer", "dev", "issuer (project) id, the iss claim")
	fs.StringVar(&f.user, "user", "", "end-user id, the sub claim (required)")
	fs.Float64Var(&f.aiUSD, "ai-usd", 5, "model budget for the window, in USD")
	fs.Int64Var(&f.compute, "compute", 3600, "sandbox compute budget for the window, in seconds")
	fs.StringVar(&f.window, "window", string(token.WindowDay), "budget window: hour, day, week, month or lifetime")
	fs.StringVar(&f.windowStart, "window-start", "", "RFC 3339 start of the budget window (default: start of the current UTC window; none for lifetime)")
	fs.DurationVar(&f.ttl, "ttl", time.Hour, "token lifetime")
	fs.StringVar(&f.aud, "aud", "", "audience, the aud claim (must match the edge's when it has one)")
	fs.StringVar(&f.dataDir, "data-dir", env.DataDir(), "data directory holding "+file.DefaultFileName+"; $WARREN_DATA_DIR sets the default")
	fs.StringVar(&f.secretFile, "secret-file", "", "sign with the issuer secret in this file instead of the data dir's (or $"+issuerSecretEnv+"): a wsk_ text secret as `warren admin keys rotate` prints it, a legacy standard base64 key, or base64:/raw: to force one")
	fs.StringVar(&f.kid, "kid", "", "key id for the kid header, with -secret-file or $"+issuerSecretEnv+" (none: the edge tries the current and previous keys)")
	fs.StringVar(&f.model, "model", "", "the only model allowed, permissions.model")
	fs.StringVar(&f.tools, "tools", "", "comma-separated tools the agent may use, permissions.tools (default: no restriction)")
	fs.StringVar(&f.blocked, "blocked-tools", "", "comma-separated tools the agent may not use, permissions.blockedTools")
	fs.IntVar(&f.maxTurns, "max-turns", 0, "cap on agent turns per prompt, permissions.maxTurns (0: none)")
	fs.StringVar(&f.tmpl, "template", "", "workspace template a NEW sandbox of this user starts from, the template claim (default: the runner's, \"default\"); see warren deploy")
}

// budget is the token's budget from -ai-usd, -compute, -window and -window-start, its window starting
// at the one now falls in unless -window-start says otherwise.
func (f *tokenFlags) budget(now time.Time) (token.Budget, error) {
	if math.IsNaN(f.aiUSD) || f.aiUSD < 0 || f.aiUSD > math.MaxInt64/1e6 {
		return token.Budget{}, errors.New("-ai-usd must be a non-negative amount")
	}
	w := token.Window(f.window)
	if !w.Valid() {
		return token.Budget{}, fmt.Errorf("-window %q: want hour, day, week, month or lifetime", f.window)
	}
	budget := token.Budget{
		AIMicros:       int64(math.Round(f.aiUSD * 1e6)),
		ComputeSeconds: f.compute,
		Window:         w,
		WindowStart:    w.Start(now),
	}
	if f.windowStart == "" {
		return budget, nil
	}
	if w == token.WindowLifetime {
		return token.Budget{}, errors.New("-window-start does not apply to -window lifetime")
	}
	t, err := time.Parse(time.RFC3339, f.windowStart)
	if err != nil {
		return token.Budget{}, fmt.Errorf("-window-start: %w", err)
	}
	budget.WindowStart = t.UTC()
	return budget, nil
}

// claims are the token's claims from the flags, issued now.
func (f *tokenFlags) claims(now time.Time) (token.Claims, error) {
	if f.user == "" {
		return token.Claims{}, errors.New("-user is required")
	}
	if f.ttl <= 0 {
		return token.Claims{}, errors.New("-ttl must be positive")
	}
	budget, err := f.budget(now)
	if err != nil {
		return token.Claims{}, err
	}
	claims := token.Claims{
		Issuer:    f.issuer,
		Subject:   f.user,
		IssuedAt:  now,
		ExpiresAt: now.Add(f.ttl),
		HasBudget: true,
		Budget:    budget,
		Permissions: token.Permissions{
			Tools:        tokenList(f.tools),
			BlockedTools: tokenList(f.blocked),
			MaxTurns:     f.maxTurns,
			Model:        f.model,
		},
	}
	if f.aud != "" {
		claims.Audience = []string{f.aud}
	}
	if f.tmpl != "" {
		if !token.ValidTemplate(f.tmpl) {
			return token.Claims{}, fmt.Errorf("-template %q: want 1 to %d bytes of [a-z0-9._-], starting with a letter or digit", f.tmpl, token.MaxTemplateLen)
		}
		claims.Template = f.tmpl
	}
	return claims, nil
}

// runToken prints one signed token on stdout and nothing else, so TOKEN=$(warren token -user u) works.
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warren token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren token [flags]\n\nMints an end user's token with a dev issuer's secret.")
	var f tokenFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	claims, err := f.claims(time.Now().UTC().Truncate(time.Second))
	if err != nil {
		return err
	}
	given, err := givenSecret(f.secretFile)
	if err != nil {
		return err
	}
	key, err := tokenKey(ctx, f.issuer, f.dataDir, given, f.kid, stderr)
	if err != nil {
		return err
	}
	tok, err := token.Mint(key, claims)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// givenSecret is the secret of -secret-file, else of $WARREN_ISSUER_SECRET, else "" (the data dir's key).
// Surrounding white space (a trailing newline) is dropped.
func givenSecret(path string) (string, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("-secret-file: %w", err)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", errors.New("-secret-file is empty")
		}
		return s, nil
	}
	return strings.TrimSpace(os.Getenv(issuerSecretEnv)), nil
}

// tokenKey is the given secret's key, or else the issuer's current key from the data dir's secrets file.
func tokenKey(ctx context.Context, issuer, dataDir, given, kid string, stderr io.Writer) (secrets.Key, error) {
	if given != "" {
		secret, err := tokenSecret(given, stderr)
		if err != nil {
			return secrets.Key{}, err
		}
		return secrets.Key{ID: kid, Secret: secret}, nil
	}
	if kid != "" {
		return secrets.Key{}, errors.New("-kid needs -secret-file or $" + issuerSecretEnv + " (keys from the data dir carry their own kid)")
	}
	path := filepath.Join(dataDir, file.DefaultFileName)
	store, err := file.Open(path)
	if err != nil {
		return secrets.Key{}, fmt.Errorf("open secrets: %w", err)
	}
	keys, err := store.IssuerKeys(ctx, issuer)
	if errors.Is(err, secrets.ErrUnknownIssuer) {
		return secrets.Key{}, fmt.Errorf("issuer %q has no key in %s: run `warren dev` once to create the dev issuer, or give its secret with -secret-file or $%s", issuer, path, issuerSecretEnv)
	}
	if err != nil {
		return secrets.Key{}, fmt.Errorf("issuer %q keys: %w", issuer, err)
	}
	return keys[0], nil
}

// tokenSecret turns a given secret into the HMAC key, by the rule the edge applies to stored secrets
// (secrets.KeyFromStored): a "wsk_" text secret signs with its own bytes (never decoded; a malformed one is
// refused), and padded standard base64 (a legacy key) with the decoded bytes, with a note on stderr.
// "raw:..." and "base64:..." force one reading; anything else is used as text, with a note. Errors never
// hold the secret.
func tokenSecret(s string, stderr io.Writer) ([]byte, error) {
	var secret []byte
	switch {
	case strings.HasPrefix(s, "raw:"):
		secret = []byte(strings.TrimPrefix(s, "raw:"))
	case strings.HasPrefix(s, "base64:"):
		b, err := base64.StdEncoding.Strict().DecodeString(strings.TrimPrefix(s, "base64:"))
		if err != nil {
			return nil, errors.New("the base64: secret is not valid standard base64")
		}
		secret = b
	case strings.HasPrefix(s, secrets.TextSecretPrefix):
		k, err := secrets.KeyFromStored("", s, 1)
		if err != nil {
			return nil, fmt.Errorf("the given secret: %w (prefix it with raw: to sign with it anyway)", err)
		}
		secret = k.Secret
	default:
		if b, err := base64.StdEncoding.Strict().DecodeString(s); err == nil && len(b) > 0 {
			fmt.Fprintln(stderr, "warren token: the secret is read as a legacy base64 key (prefix it with raw: to sign with the text itself)")
			secret = b
		} else {
			fmt.Fprintln(stderr, "warren token: the secret is neither a wsk_ text secret nor base64: signing with its text")
			secret = []byte(s)
		}
	}
	if len(secret) == 0 {
		return nil, errors.New("the given secret is empty")
	}
	return secret, nil
}

// tokenList splits a comma-separated flag; empty means nil (no restriction).
func tokenList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
