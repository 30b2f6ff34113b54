package wire

import (
	"encoding/json"
	"regexp"
	"testing"
)

// chuckyClass restates how the Chucky Cloud TypeScript SDK's client picks an error class for an error
// message it is given no code for: createError(message) → parseErrorCode(message), the first of these
// patterns (case-insensitive) that matches, else UNKNOWN_ERROR (Chucky-Cloud/chucky-sdk-typescript,
// src/utils/errors.ts, MIT; read as of its 0.3.x sources). createError maps TOOL_EXECUTION_ERROR to no
// class of its own (a plain ChuckyError).
func chuckyClass(message string) string {
	for _, p := range []struct{ re, class string }{
		{`budget.*exceed`, "BudgetExceededError"},
		{`concurrency.*limit`, "ConcurrencyLimitError"},
		{`rate.*limit`, "RateLimitError"},
		{`auth|unauthorized|forbidden`, "AuthenticationError"},
		{`timeout`, "TimeoutError"},
		{`connect|disconnect|websocket`, "ConnectionError"},
		{`session`, "SessionError"},
		{`tool`, "ChuckyError(TOOL_EXECUTION_ERROR)"},
		{`invalid|validation`, "ValidationError"},
	} {
		if regexp.MustCompile(`(?i)` + p.re).MatchString(message) {
			return p.class
		}
	}
	return "ChuckyError(UNKNOWN_ERROR)"
}

// TestChannelErrorsSelectTheChuckyClass: for every code, the error message the agent channel sends (and
// its close reason) makes the Chucky SDK's client choose the class the code means, for the messages
// Warren sends with that code. Before the prefixes a spent budget ("the budget of this window is spent")
// was an UNKNOWN_ERROR and a bad token signature ("invalid token signature") a ValidationError.
func TestChannelErrorsSelectTheChuckyClass(t *testing.T) {
	for _, tc := range []struct {
		code     Code
		messages []string // as the code base writes them
		class    string
	}{
		{BudgetExceeded, []string{"the AI budget of this day is spent: $2.000000 of $2.000000 used (window from 2026-11-29T00:00:00Z; resets at 2026-11-30T00:00:00Z)",
			"the compute budget of this user is spent: 600 of 600 sandbox seconds used (a lifetime budget: it does not reset; raise the quota or mint a larger budget)",
			"the budget of this window is spent", ""}, "BudgetExceededError"},
		{ConcurrencyLimit, []string{"too many concurrent sessions for this user; close one first",
			"2 sessions are already live in this sandbox; close one first"}, "ConcurrencyLimitError"},
		{RateLimited, []string{"too many prompts; slow down", "too many connections; slow down"}, "RateLimitError"},
		{Unauthenticated, []string{"invalid token signature", "token expired", "malformed token", "invalid token claims",
			"no token: pass Authorization: Bearer <token> or ?token="}, "AuthenticationError"},
		{PermissionDenied, []string{"the token's permissions do not allow tool Bash"}, "AuthenticationError"},
		{Timeout, []string{"no init message within 30s", "client tool mcp__t__x did not answer within 5m0s"}, "TimeoutError"},
		{Unavailable, []string{"runner shutting down; reconnect to resume", "edge shutting down; reconnect to resume",
			"the sandbox stopped unexpectedly; reconnect to resume", "client too slow; reconnect with lastSeq",
			"session leases are unavailable; new sessions are refused until they are back"}, "ConnectionError"},
		{NotFound, []string{"no session abc to attach to or resume"}, "SessionError"},
		{Conflict, []string{"8 prompts are already queued; wait or interrupt"}, "SessionError"},
		{InvalidArgument, []string{"binary frames are not part of the protocol; send JSON text frames",
			"the first message must be init, got \"ping\"", "unknown message type \"bogus\"", "message has no type",
			"user message role must be \"user\", got \"assistant\""}, "ValidationError"},
		{PayloadTooLarge, []string{"frame exceeds 4194304 bytes"}, "ValidationError"},
		{Internal, []string{"internal error"}, "ChuckyError(UNKNOWN_ERROR)"},
	} {
		for _, msg := range tc.messages {
			e := Errorf(tc.code, "%s", msg)
			var m struct {
				Payload Error `json:"payload"`
			}
			if err := json.Unmarshal(ErrorMessage(e), &m); err != nil {
				t.Fatal(err)
			}
			if m.Payload.Code != tc.code {
				t.Errorf("%s: the code changed to %s", tc.code, m.Payload.Code)
			}
			if got := chuckyClass(m.Payload.Message); got != tc.class {
				t.Errorf("%s %q: sent as %q, which the Chucky client makes a %s, want %s", tc.code, msg, m.Payload.Message, got, tc.class)
			}
			var r Error
			if err := json.Unmarshal([]byte(CloseReason(e)), &r); err == nil && chuckyClass(r.Message) != tc.class {
				t.Errorf("%s %q: close reason %q is a %s, want %s", tc.code, msg, r.Message, chuckyClass(r.Message), tc.class)
			}
		}
	}
	// The phrase is added once: an error relayed again (the edge passes runner errors on) is unchanged.
	if got := ChannelMessage(BudgetExceeded, ChannelMessage(BudgetExceeded, "spent")); got != "budget exceeded: spent" {
		t.Fatalf("prefixed twice: %q", got)
	}
}

func TestBareMessage(t *testing.T) {
	for _, msg := range []string{"the AI budget is spent", "", "budget exceeded"} {
		if got := BareMessage(BudgetExceeded, ChannelMessage(BudgetExceeded, msg)); got != msg && !(msg == "" && got == "budget exceeded") {
			t.Errorf("BareMessage(ChannelMessage(%q)) = %q", msg, got)
		}
	}
	if got := BareMessage(Internal, "internal error"); got != "internal error" {
		t.Errorf("internal: %q", got)
	}
}
