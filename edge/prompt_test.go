package edge

import (
	"context"
	"log/slog"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// The connect path and the relay take from buckets named the same way: the user's (issuer and subject) and
// its issuer's, per kind, each bursting to its rate and to at least one token.
func TestRateTakes(t *testing.T) {
	a := &admitted{claims: &token.Claims{Issuer: "acme", Subject: "alice"}}
	got := rateTakes("prompt", a, 30, -1)
	want := []Take{
		{Key: "prompt/user/acme\x00alice", RatePerMin: 30, Burst: 30},
		{Key: "prompt/issuer/acme", RatePerMin: -1, Burst: 1},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("rateTakes(prompt) = %+v, want %+v", got, want)
	}
	got = rateTakes("connect", a, 0, 600)
	want = []Take{
		{Key: "connect/user/acme\x00alice", RatePerMin: 0, Burst: 1},
		{Key: "connect/issuer/acme", RatePerMin: 600, Burst: 600},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("rateTakes(connect) = %+v, want %+v", got, want)
	}
}

// admitPrompt lets prompts through while the user's bucket has tokens, then refuses with rate_limited and a
// retry hint; prompts do not spend the connect buckets.
func TestAdmitPrompt(t *testing.T) {
	ctx := context.Background()
	e := &Edge{log: slog.New(slog.DiscardHandler), limiter: NewLimiter(nil, 0)}
	a := &admitted{claims: &token.Claims{Issuer: "acme", Subject: "alice"}}
	a.limit.Rates = billing.Rates{PromptsPerUser: 2, PromptsPerIssuer: -1, ConnectsPerUser: 1, ConnectsPerIssuer: -1}
	for i := range 2 {
		if err := e.admitPrompt(ctx, a); err != nil {
			t.Fatalf("prompt %d refused: %v", i, err)
		}
	}
	err := e.admitPrompt(ctx, a)
	if err == nil || err.Code != wire.RateLimited || err.Details["retry_after_seconds"] == nil {
		t.Fatalf("third prompt = %+v, want rate_limited with retry_after_seconds", err)
	}
	if ok, _ := e.takeRates(ctx, rateTakes("connect", a, 1, -1)...); !ok {
		t.Error("prompts spent the connect bucket")
	}
}
