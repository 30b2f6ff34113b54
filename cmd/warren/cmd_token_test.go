package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
)

func devStore(t *testing.T) (string, *file.Store) {
	t.Helper()
	dir := t.TempDir()
	s, err := file.Open(filepath.Join(dir, file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnsureIssuer("dev"); err != nil {
		t.Fatal(err)
	}
	return dir, s
}

func TestRunTokenMintsVerifiableToken(t *testing.T) {
	dir, store := devStore(t)
	var stdout, stderr bytes.Buffer
	args := []string{"-data-dir", dir, "-user", "alice", "-ai-usd", "1.25", "-compute", "60", "-window", "week",
		"-tools", "Read, Bash", "-max-turns", "7", "-model", "m1", "-aud", "warren", "-template", "py"}
	if err := runToken(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("runToken: %v (stderr %q)", err, stderr.String())
	}
	raw, rest, _ := strings.Cut(stdout.String(), "\n")
	if rest != "" || stderr.Len() != 0 {
		t.Fatalf("stdout must hold only the token line; got %q, stderr %q", stdout.String(), stderr.String())
	}
	c, err := token.NewVerifier(store, token.VerifierOptions{Audience: "warren"}).Verify(context.Background(), raw)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	b := c.Budget
	if c.Issuer != "dev" || c.Subject != "alice" || !c.HasBudget || b.AIMicros != 1_250_000 || b.ComputeSeconds != 60 ||
		b.Window != token.WindowWeek || !b.WindowStart.Equal(token.WindowWeek.Start(c.IssuedAt)) {
		t.Fatalf("claims %+v", c)
	}
	if p := c.Permissions; !slices.Equal(p.Tools, []string{"Read", "Bash"}) || p.MaxTurns != 7 || p.Model != "m1" || p.BlockedTools != nil {
		t.Fatalf("permissions %+v", p)
	}
	if c.Template != "py" {
		t.Fatalf("template claim %q, want py", c.Template)
	}
	if got := c.ExpiresAt.Sub(c.IssuedAt); got.Hours() != 1 {
		t.Fatalf("ttl %v, want 1h", got)
	}
}

func TestRunTokenWithSecret(t *testing.T) {
	dir, store := devStore(t)
	keys, err := store.IssuerKeys(context.Background(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	text := string(keys[0].Secret)
	if keys[0].Form != secrets.FormText || !strings.HasPrefix(text, "wsk_") {
		t.Fatalf("the dev issuer's key is %v, want a wsk_ text secret", keys[0].Form)
	}
	v := token.NewVerifier(store, token.VerifierOptions{})
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mint := func(t *testing.T, env string, args ...string) (string, string, error) {
		t.Helper()
		t.Setenv(issuerSecretEnv, env)
		var stdout, stderr bytes.Buffer
		// -data-dir points nowhere: the key must come from the given secret alone.
		args = append([]string{"-data-dir", filepath.Join(dir, "absent"), "-user", "bob", "-window", "lifetime"}, args...)
		err := runToken(context.Background(), args, &stdout, &stderr)
		return strings.TrimSpace(stdout.String()), stderr.String(), err
	}
	for name, tc := range map[string]struct {
		env  string
		args []string
	}{
		"text from the env":        {text, []string{"-kid", keys[0].ID}},
		"text from a file":         {"", []string{"-secret-file", secretFile, "-kid", keys[0].ID}},
		"file wins over the env":   {"wsk_" + strings.Repeat("x", 43), []string{"-secret-file", secretFile}},
		"text from the env no kid": {text, nil},
		"raw: text":                {"raw:" + text, nil},
	} {
		tok, stderr, err := mint(t, tc.env, tc.args...)
		if err != nil {
			t.Fatalf("%s: runToken: %v", name, err)
		}
		if strings.Contains(stderr, text) {
			t.Fatalf("%s: the secret reached stderr", name)
		}
		c, err := v.Verify(context.Background(), tok)
		if err != nil {
			t.Fatalf("%s: Verify: %v", name, err)
		}
		if !c.Budget.WindowStart.IsZero() {
			t.Fatalf("lifetime token has windowStart %v", c.Budget.WindowStart)
		}
	}
	// A malformed wsk_ secret is refused, never decoded or used; the error does not hold it.
	bad := text[:20]
	if _, _, err := mint(t, bad); err == nil || strings.Contains(err.Error(), bad) || !errors.Is(err, secrets.ErrBadSecret) {
		t.Fatalf("malformed text secret: %v", err)
	}

	// A legacy base64 key signs with its decoded bytes, with or without base64:.
	raw := bytes.Repeat([]byte{9}, 32)
	b64 := base64.StdEncoding.EncodeToString(raw)
	legacy := token.NewVerifier(staticKeys{{ID: "dev-v1", Secret: raw}}, token.VerifierOptions{})
	for _, secret := range []string{b64, "base64:" + b64} {
		tok, stderr, err := mint(t, secret)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := legacy.Verify(context.Background(), tok); err != nil {
			t.Fatalf("legacy %q: %v (stderr %s)", secret[:7], err, stderr)
		}
	}
	// raw: signs with the base64 text itself, which is not the legacy key.
	tok, _, err := mint(t, "raw:"+b64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.Verify(context.Background(), tok); token.Reason(err) != "bad_signature" {
		t.Fatalf("raw: secret verified against the legacy key: %v", err)
	}
	// There is no -secret flag: secrets are never flag values.
	if _, _, err := mint(t, "", "-secret", text); err == nil {
		t.Fatal("-secret was accepted")
	}
}

// staticKeys is a secrets.Store holding one issuer's keys, whatever the issuer.
type staticKeys []secrets.Key

func (s staticKeys) IssuerKeys(context.Context, string) ([]secrets.Key, error) { return s, nil }

func TestRunTokenErrors(t *testing.T) {
	dir, _ := devStore(t)
	t.Setenv(issuerSecretEnv, "")
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no user", []string{"-data-dir", dir}, "-user is required"},
		{"unknown issuer", []string{"-data-dir", dir, "-user", "a", "-issuer", "acme"}, "run `warren dev` once"},
		{"no data dir", []string{"-data-dir", filepath.Join(dir, "none"), "-user", "a"}, "run `warren dev` once"},
		{"bad window", []string{"-data-dir", dir, "-user", "a", "-window", "year"}, "-window"},
		{"window start with lifetime", []string{"-data-dir", dir, "-user", "a", "-window", "lifetime", "-window-start", "2026-01-01T00:00:00Z"}, "lifetime"},
		{"bad window start", []string{"-data-dir", dir, "-user", "a", "-window-start", "monday"}, "-window-start"},
		{"negative usd", []string{"-data-dir", dir, "-user", "a", "-ai-usd", "-1"}, "-ai-usd"},
		{"negative compute", []string{"-data-dir", dir, "-user", "a", "-compute", "-1"}, "budget.compute"},
		{"kid without secret", []string{"-data-dir", dir, "-user", "a", "-kid", "k"}, "-kid needs -secret-file"},
		{"empty secret file", []string{"-data-dir", dir, "-user", "a", "-secret-file", emptyFile}, "-secret-file is empty"},
		{"missing secret file", []string{"-data-dir", dir, "-user", "a", "-secret-file", emptyFile + ".none"}, "-secret-file"},
		{"zero ttl", []string{"-data-dir", dir, "-user", "a", "-ttl", "0s"}, "-ttl"},
		{"bad template", []string{"-data-dir", dir, "-user", "a", "-template", "../py"}, "-template"},
		{"stray argument", []string{"-data-dir", dir, "-user", "a", "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runToken(context.Background(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout %q on error", stdout.String())
			}
		})
	}
}
