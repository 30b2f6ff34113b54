package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
)

func init() {
	register("token", "mint an end-user JWT (dev issuer secret from the data dir, or -secret)", runToken)
}

// runToken prints one signed token on stdout and nothing else, so TOKEN=$(warren token -user u) works.
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warren token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	issuer := fs.String("issuer", "dev", "issuer (project) id, the iss claim")
	user := fs.String("user", "", "end-user id, the sub claim (required)")
	aiUSD := fs.Float64("ai-usd", 5, "model budget for the window, in USD")
	compute := fs.Int64("compute", 3600, "sandbox compute budget for the window, in seconds")
	window := fs.String("window", string(token.WindowDay), "budget window: hour, day, week, month or lifetime")
	windowStart := fs.String("window-start", "", "RFC 3339 start of the budget window (default: start of the current UTC window; none for lifetime)")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	aud := fs.String("aud", "", "audience, the aud claim (must match the edge's when it has one)")
	dataDir := fs.String("data-dir", defaultDataDir(), "data directory holding "+file.DefaultFileName+"; $WARREN_DATA_DIR sets the default")
	secretFlag := fs.String("secret", "", "sign with this HMAC secret instead of the data dir's: standard base64 or text; prefix base64: or raw: to force one")
	kid := fs.String("kid", "", "key id for the kid header, with -secret (none: the edge tries the current and previous keys)")
	model := fs.String("model", "", "the only model allowed, permissions.model")
	tools := fs.String("tools", "", "comma-separated tools the agent may use, permissions.tools (default: no restriction)")
	blocked := fs.String("blocked-tools", "", "comma-separated tools the agent may not use, permissions.blockedTools")
	maxTurns := fs.Int("max-turns", 0, "cap on agent turns per prompt, permissions.maxTurns (0: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *user == "" {
		return errors.New("-user is required")
	}
	if *ttl <= 0 {
		return errors.New("-ttl must be positive")
	}
	if math.IsNaN(*aiUSD) || *aiUSD < 0 || *aiUSD > math.MaxInt64/1e6 {
		return errors.New("-ai-usd must be a non-negative amount")
	}
	w := token.Window(*window)
	if !w.Valid() {
		return fmt.Errorf("-window %q: want hour, day, week, month or lifetime", *window)
	}

	now := time.Now().UTC().Truncate(time.Second)
	budget := token.Budget{
		AIMicros:       int64(math.Round(*aiUSD * 1e6)),
		ComputeSeconds: *compute,
		Window:         w,
		WindowStart:    w.Start(now),
	}
	if *windowStart != "" {
		if w == token.WindowLifetime {
			return errors.New("-window-start does not apply to -window lifetime")
		}
		t, err := time.Parse(time.RFC3339, *windowStart)
		if err != nil {
			return fmt.Errorf("-window-start: %w", err)
		}
		budget.WindowStart = t.UTC()
	}
	claims := token.Claims{
		Issuer:    *issuer,
		Subject:   *user,
		IssuedAt:  now,
		ExpiresAt: now.Add(*ttl),
		HasBudget: true,
		Budget:    budget,
		Permissions: token.Permissions{
			Tools:        tokenList(*tools),
			BlockedTools: tokenList(*blocked),
			MaxTurns:     *maxTurns,
			Model:        *model,
		},
	}
	if *aud != "" {
		claims.Audience = []string{*aud}
	}

	key, err := tokenKey(ctx, *issuer, *dataDir, *secretFlag, *kid, stderr)
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

// tokenKey is the -secret key, or else the issuer's current key from the data dir's secrets file.
func tokenKey(ctx context.Context, issuer, dataDir, secretFlag, kid string, stderr io.Writer) (secrets.Key, error) {
	if secretFlag != "" {
		secret, err := tokenSecret(secretFlag, stderr)
		if err != nil {
			return secrets.Key{}, err
		}
		return secrets.Key{ID: kid, Secret: secret}, nil
	}
	if kid != "" {
		return secrets.Key{}, errors.New("-kid needs -secret (keys from the data dir carry their own kid)")
	}
	path := filepath.Join(dataDir, file.DefaultFileName)
	store, err := file.Open(path)
	if err != nil {
		return secrets.Key{}, fmt.Errorf("open secrets: %w", err)
	}
	keys, err := store.IssuerKeys(ctx, issuer)
	if errors.Is(err, secrets.ErrUnknownIssuer) {
		return secrets.Key{}, fmt.Errorf("issuer %q has no key in %s: run `warren dev` once to create the dev issuer, or pass -secret", issuer, path)
	}
	if err != nil {
		return secrets.Key{}, fmt.Errorf("issuer %q keys: %w", issuer, err)
	}
	return keys[0], nil
}

// tokenSecret decodes -secret: "base64:..." and "raw:..." say which; otherwise padded standard base64 (what
// the secrets file and the key rotation API hand out) is decoded, with a note on stderr, and anything else is
// used as the text's bytes.
func tokenSecret(s string, stderr io.Writer) ([]byte, error) {
	var secret []byte
	switch {
	case strings.HasPrefix(s, "raw:"):
		secret = []byte(strings.TrimPrefix(s, "raw:"))
	case strings.HasPrefix(s, "base64:"):
		b, err := base64.StdEncoding.Strict().DecodeString(strings.TrimPrefix(s, "base64:"))
		if err != nil {
			return nil, errors.New("-secret base64: is not valid standard base64")
		}
		secret = b
	default:
		if b, err := base64.StdEncoding.Strict().DecodeString(s); err == nil && len(b) > 0 {
			fmt.Fprintln(stderr, "warren token: -secret read as base64 (prefix it with raw: to sign with the text itself)")
			secret = b
		} else {
			secret = []byte(s)
		}
	}
	if len(secret) == 0 {
		return nil, errors.New("-secret is empty")
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
