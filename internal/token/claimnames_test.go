package token_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// The claims of these tests, signed by acme's current key: alice with a small budget and no tools. Every
// registered claim and nested field is present, so an attack on any of them has something to override.
var (
	expAt     = testNow.Add(time.Hour).Unix()
	claimBase = map[string]string{
		"iss":         `"acme"`,
		"sub":         `"alice"`,
		"aud":         `"warren"`,
		"exp":         fmt.Sprint(expAt),
		"nbf":         fmt.Sprint(testNow.Add(-time.Hour).Unix()),
		"iat":         fmt.Sprint(testNow.Add(-time.Minute).Unix()),
		"template":    `"py"`,
		"budget":      `{"ai":1,"compute":2,"window":"day","windowStart":"2026-03-04T00:00:00Z"}`,
		"permissions": `{"tools":[],"blockedTools":["Bash"],"maxTurns":1,"model":"claude-haiku-4-5"}`,
		"sdkConfig":   `{"model":"claude-haiku-4-5","maxTurns":1}`,
	}
	claimOrder = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "template", "budget", "permissions", "sdkConfig"}
)

// claimsJSON writes claimBase in claimOrder with replace applied to the text, so a test can put a member
// twice or add one next to the real one.
func claimsJSON(replace ...string) string {
	parts := make([]string, 0, len(claimOrder))
	for _, k := range claimOrder {
		parts = append(parts, fmt.Sprintf("%q:%s", k, claimBase[k]))
	}
	return strings.NewReplacer(replace...).Replace("{" + strings.Join(parts, ",") + "}")
}

func verifyClaims(t *testing.T, e *env, payload string) (*token.Claims, error) {
	t.Helper()
	v := token.NewVerifier(e.store, token.VerifierOptions{Audience: "warren", Now: func() time.Time { return testNow }})
	raw := craft(t, hs256kid, payload, jwt.SigningMethodHS256, e.v3.Secret)
	c, err := v.Verify(context.Background(), raw)
	if err != nil {
		checkError(t, err, raw, e)
	}
	return c, err
}

// refusedClaims asserts that claimBase with old replaced by new is refused as bad_claims, and answers the
// error.
func refusedClaims(t *testing.T, e *env, old, new string) error {
	t.Helper()
	p := claimsJSON(old, new)
	if p == claimsJSON() {
		t.Fatal("the replacement changed nothing")
	}
	c, err := verifyClaims(t, e, p)
	if token.Reason(err) != "bad_claims" {
		t.Fatalf("Verify = %+v, %v; want bad_claims", c, err)
	}
	return err
}

// TestClaimCaseVariantsNeverOverride: a member whose name differs from a registered claim only in case (or
// by Unicode case folding: ſ is s, K is K), placed after the real one, never changes what the token says.
// encoding/json matched such names and let the last one win, so {"sub":"alice","Sub":"bob"} acted as bob
// and {"exp":<past>,"EXP":<future>} was accepted. At the top level the variant is an unknown claim and is
// ignored, as in every other JWT library; inside budget and permissions, where unknown fields are refused,
// it is refused (bad_claims); inside sdkConfig it reaches the session options, which refuse it as an
// unknown option.
func TestClaimCaseVariantsNeverOverride(t *testing.T) {
	e := newEnv(t, t.TempDir())
	want, err := verifyClaims(t, e, claimsJSON())
	if err != nil {
		t.Fatalf("base claims: %v", err)
	}
	if want.Subject != "alice" || want.Budget.AIMicros != 1 || len(want.Permissions.Tools) != 0 || want.Permissions.Tools == nil {
		t.Fatalf("base claims = %+v", want)
	}
	future := fmt.Sprint(testNow.Add(24 * time.Hour).Unix())
	ignored := []struct{ name, old, new string }{
		{"Sub", `"sub":"alice"`, `"sub":"alice","Sub":"bob"`},
		{"SUB", `"sub":"alice"`, `"sub":"alice","SUB":"bob"`},
		{"ſub (long s)", `"sub":"alice"`, `"sub":"alice","ſub":"bob"`},
		{"ISS", `"iss":"acme"`, `"iss":"acme","ISS":"other"`},
		{"Aud", `"aud":"warren"`, `"aud":"warren","Aud":["warren","x"]`},
		{"EXP", `"exp":`, `"EXP":` + future + `,"exp":`},
		{"Nbf", `"nbf":`, `"Nbf":0,"nbf":`},
		{"IAT", `"iat":`, `"IAT":0,"iat":`},
		{"Template", `"template":"py"`, `"template":"py","Template":"node"`},
		{"BUDGET", `"budget":`, `"BUDGET":{"ai":1000000000000,"window":"lifetime"},"budget":`},
		{"Budget after", `"permissions":`, `"Budget":{"ai":1000000000000,"window":"lifetime"},"permissions":`},
		{"Permissions", `"sdkConfig":`, `"Permissions":{"tools":["Bash"],"maxTurns":1000},"sdkConfig":`},
		{"SDKConfig", `"sdkConfig":{"model":"claude-haiku-4-5","maxTurns":1}`, `"sdkConfig":{"model":"claude-haiku-4-5","maxTurns":1},"SDKConfig":{"model":"claude-opus-4-1"},"sdkconfig":{}`},
	}
	for _, tt := range ignored {
		t.Run(tt.name, func(t *testing.T) {
			c, err := verifyClaims(t, e, claimsJSON(tt.old, tt.new))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("the case variant changed the claims:\n got %+v\nwant %+v", c, want)
			}
		})
	}
	t.Run("EXP cannot extend an expired token", func(t *testing.T) {
		p := claimsJSON(`"exp":`+fmt.Sprint(expAt), `"exp":1,"EXP":`+future)
		if _, err := verifyClaims(t, e, p); token.Reason(err) != "expired" {
			t.Fatalf("Reason = %q (%v), want expired", token.Reason(err), err)
		}
	})
	refused := []struct{ name, old, new string }{
		{"budget.AI", `"ai":1,`, `"ai":1,"AI":1000000000000,`},
		{"budget.Window", `"window":"day"`, `"window":"day","Window":"lifetime"`},
		{"budget.windowstart", `"window":"day"`, `"window":"day","windowstart":"2000-01-01T00:00:00Z"`},
		{"budget.Compute", `"compute":2`, `"compute":2,"Compute":99999`},
		{"permissions.Tools", `"tools":[]`, `"tools":[],"Tools":["Bash"]`},
		{"permissions.BlockedTools", `"blockedTools":["Bash"]`, `"blockedTools":["Bash"],"BlockedTools":[]`},
		{"permissions.MaxTurns", `"maxTurns":1,"model"`, `"maxTurns":1,"MaxTurns":1000,"model"`},
		{"permissions.Model", `"model":"claude-haiku-4-5"}`, `"model":"claude-haiku-4-5","Model":"claude-opus-4-1"}`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) { refusedClaims(t, e, tt.old, tt.new) })
	}
	t.Run("sdkConfig.Model", func(t *testing.T) {
		c, err := verifyClaims(t, e, claimsJSON(`"maxTurns":1}`, `"maxTurns":1,"Model":"claude-opus-4-1","MaxTurns":1000}`))
		if err != nil {
			t.Fatalf("Verify: %v", err) // sdkConfig is kept as written; the session options judge it
		}
		o, err := wire.DecodeSessionOptions(c.SDKConfig)
		if wire.CodeOf(err) != wire.InvalidArgument || !strings.Contains(err.Error(), "MaxTurns") && !strings.Contains(err.Error(), "Model") {
			t.Fatalf("DecodeSessionOptions = %+v, %v; want invalid_argument naming the variant", o, err)
		}
	})
}

// TestClaimDuplicatesRefused: a registered claim, or a field of budget, permissions or sdkConfig, named twice
// is refused (bad_claims) with a detail naming it, whichever value comes first. encoding/json took the
// last one.
func TestClaimDuplicatesRefused(t *testing.T) {
	e := newEnv(t, t.TempDir())
	tests := []struct{ old, new, detail string }{
		{`"iss":"acme"`, `"iss":"acme","iss":"acme"`, "duplicate claim iss"},
		{`"sub":"alice"`, `"sub":"alice","sub":"bob"`, "duplicate claim sub"},
		{`"aud":"warren"`, `"aud":"warren","aud":"x"`, "duplicate claim aud"},
		{`"exp":`, `"exp":1,"exp":`, "duplicate claim exp"},
		{`"nbf":`, `"nbf":1,"nbf":`, "duplicate claim nbf"},
		{`"iat":`, `"iat":1,"iat":`, "duplicate claim iat"},
		{`"template":"py"`, `"template":"py","template":"node"`, "duplicate claim template"},
		{`"budget":`, `"budget":{"window":"lifetime"},"budget":`, "duplicate claim budget"},
		{`"permissions":`, `"permissions":{},"permissions":`, "duplicate claim permissions"},
		{`"sdkConfig":`, `"sdkConfig":{},"sdkConfig":`, "duplicate claim sdkConfig"},
		{`"ai":1,`, `"ai":1,"ai":1000000000000,`, "duplicate claim budget.ai"},
		{`"compute":2`, `"compute":2,"compute":99999`, "duplicate claim budget.compute"},
		{`"window":"day"`, `"window":"day","window":"lifetime"`, "duplicate claim budget.window"},
		{`"windowStart":"2026`, `"windowStart":"2000-01-01T00:00:00Z","windowStart":"2026`, "duplicate claim budget.windowStart"},
		{`"tools":[]`, `"tools":[],"tools":["Bash"]`, "duplicate claim permissions.tools"},
		{`"blockedTools":["Bash"]`, `"blockedTools":["Bash"],"blockedTools":[]`, "duplicate claim permissions.blockedTools"},
		{`"maxTurns":1,"model"`, `"maxTurns":1,"maxTurns":1000,"model"`, "duplicate claim permissions.maxTurns"},
		{`"model":"claude-haiku-4-5"}`, `"model":"claude-haiku-4-5","model":"claude-opus-4-1"}`, "duplicate claim permissions.model"},
		{`"maxTurns":1}`, `"maxTurns":1,"maxTurns":1000}`, "duplicate member in sdkConfig"},
		{`{"iss"`, `{"jti":"a","jti":"b","iss"`, "duplicate claim"},
	}
	for _, tt := range tests {
		t.Run(tt.detail+" "+tt.new, func(t *testing.T) {
			err := refusedClaims(t, e, tt.old, tt.new)
			var we *wire.Error
			if !errors.As(err, &we) || !strings.HasSuffix(we.Message, ": "+tt.detail) {
				t.Fatalf("message %q does not end with %q", we.Message, tt.detail)
			}
		})
	}
}
