package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
		"-tools", "Read, Bash", "-max-turns", "7", "-model", "m1", "-aud", "warren"}
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
	b64 := base64.StdEncoding.EncodeToString(keys[0].Secret)
	v := token.NewVerifier(store, token.VerifierOptions{})
	for _, secret := range []string{b64, "base64:" + b64} {
		var stdout, stderr bytes.Buffer
		// -data-dir points nowhere: the key must come from -secret alone.
		args := []string{"-data-dir", filepath.Join(dir, "absent"), "-secret", secret, "-kid", keys[0].ID, "-user", "bob", "-window", "lifetime"}
		if err := runToken(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("runToken: %v", err)
		}
		c, err := v.Verify(context.Background(), strings.TrimSpace(stdout.String()))
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if !c.Budget.WindowStart.IsZero() {
			t.Fatalf("lifetime token has windowStart %v", c.Budget.WindowStart)
		}
	}
	// raw: signs with the text itself, which is not the dev key.
	var stdout bytes.Buffer
	if err := runToken(context.Background(), []string{"-secret", "raw:" + b64, "-user", "bob"}, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), strings.TrimSpace(stdout.String())); token.Reason(err) != "bad_signature" {
		t.Fatalf("raw: secret verified against the dev key: %v", err)
	}
}

func TestRunTokenErrors(t *testing.T) {
	dir, _ := devStore(t)
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
		{"kid without secret", []string{"-data-dir", dir, "-user", "a", "-kid", "k"}, "-kid needs -secret"},
		{"zero ttl", []string{"-data-dir", dir, "-user", "a", "-ttl", "0s"}, "-ttl"},
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
