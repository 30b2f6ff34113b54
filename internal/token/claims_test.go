package token

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestDecodeClaims(t *testing.T) {
	const base = `"iss":"acme","sub":"u","exp":1900000000`
	tests := []struct {
		name, payload string
		wantErr       bool
	}{
		{"minimal", `{` + base + `}`, false},
		{"fractional exp", `{"iss":"acme","sub":"u","exp":1900000000.5}`, false},
		{"aud string", `{` + base + `,"aud":"x"}`, false},
		{"aud array", `{` + base + `,"aud":["x","y"]}`, false},
		{"aud null", `{` + base + `,"aud":null}`, false},
		{"aud number", `{` + base + `,"aud":3}`, true},
		{"aud empty entry", `{` + base + `,"aud":[""]}`, true},
		{"exp string", `{"iss":"acme","sub":"u","exp":"1900000000"}`, true},
		{"exp negative", `{"iss":"acme","sub":"u","exp":-1}`, true},
		{"exp null", `{"iss":"acme","sub":"u","exp":null}`, true},
		{"nbf bool", `{` + base + `,"nbf":true}`, true},
		{"budget null", `{` + base + `,"budget":null}`, false},
		{"budget lifetime", `{` + base + `,"budget":{"ai":0,"compute":0,"window":"lifetime"}}`, false},
		{"budget unknown field", `{` + base + `,"budget":{"window":"lifetime","usd":5}}`, true},
		{"budget array", `{` + base + `,"budget":[]}`, true},
		{"permissions tool with control char", `{` + base + `,"permissions":{"tools":["Ba\u0007sh"]}}`, true},
		{"permissions model too long", `{` + base + `,"permissions":{"model":"` + string(bytes.Repeat([]byte("m"), 257)) + `"}}`, true},
		{"sdkConfig null", `{` + base + `,"sdkConfig":null}`, false},
		{"sdkConfig string", `{` + base + `,"sdkConfig":"{}"}`, true},
		{"sub bidi override", `{"iss":"acme","sub":"u\u202e","exp":1900000000}`, true},
		{"not an object", `[]`, true},
		{"template", `{` + base + `,"template":"py"}`, false},
		{"template with dots and dashes", `{` + base + `,"template":"py-3.12_x"}`, false},
		{"template null", `{` + base + `,"template":null}`, false},
		{"template empty", `{` + base + `,"template":""}`, true},
		{"template upper case", `{` + base + `,"template":"Py"}`, true},
		{"template path", `{` + base + `,"template":"../x"}`, true},
		{"template leading dot", `{` + base + `,"template":".x"}`, true},
		{"template too long", `{` + base + `,"template":"` + string(bytes.Repeat([]byte("t"), 65)) + `"}`, true},
		{"template number", `{` + base + `,"template":3}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decodeClaims([]byte(tt.payload))
			if (err != nil) != tt.wantErr {
				t.Fatalf("decodeClaims = %+v, %v; want error %v", c, err, tt.wantErr)
			}
			var ce *claimError
			if err != nil && !errors.As(err, &ce) {
				t.Fatalf("error %T is not a claimError", err)
			}
		})
	}
}

// FuzzClaims feeds arbitrary payloads to the claims decoder: no panic; a failure is a claimError whose
// client-facing detail is one of the fixed texts; a success re-encodes (what Mint signs) and decodes back to
// the same claims, times truncated to the second.
func FuzzClaims(f *testing.F) {
	for _, s := range []string{
		`{"iss":"acme","sub":"u","exp":1900000000}`,
		`{"iss":"acme","sub":"u","exp":1900000000.25,"nbf":1,"iat":2,"aud":["a","b"]}`,
		`{"iss":"acme","sub":"u","exp":1900000000,"budget":{"ai":5000000,"compute":3600,"window":"day","windowStart":"2026-03-04T00:00:00+02:00"}}`,
		`{"iss":"acme","sub":"u","exp":1900000000,"permissions":{"tools":[],"blockedTools":["Bash"],"maxTurns":3,"model":"m"}}`,
		`{"iss":"acme","sub":"u","exp":1900000000,"sdkConfig":{"systemPrompt":"<b>&","x":[1e5,null]}}`,
		`{"iss":"acme","sub":"u","exp":"1"}`,
		`{"ISS":"a","iss":"b","sub":"u","exp":1}`,
		`{"iss":"a","iss":"b","sub":"u","exp":1}`,
		`{"iss":"acme","sub":"u","exp":1900000000,"budget":{"ai":1,"ai":2,"window":"lifetime"}}`,
		`null`, `[]`, `{}`, `{"budget":{}}`,
		`{"iss":"acme","sub":"u","exp":1900000000,"template":"py"}`,
		`{"iss":"acme","sub":"u","exp":1900000000,"template":"a/b"}`,
	} {
		f.Add([]byte(s))
	}
	details := map[string]bool{"duplicate claim": true}
	for _, d := range fixedDetails {
		details[d] = true
	}
	for _, p := range claimPointers {
		details["duplicate claim "+claimName(p)] = true
	}
	for _, obj := range []string{"budget", "permissions", "sdkConfig"} {
		details["duplicate member in "+obj] = true
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeClaims(data)
		if err != nil {
			var ce *claimError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a claimError", err)
			}
			if !details[ce.detail] {
				t.Fatalf("detail %q is not one of the fixed texts", ce.detail)
			}
			return
		}
		body, err := c.marshal()
		if err != nil {
			t.Fatalf("decoded claims do not re-encode: %v", err)
		}
		c2, err := decodeClaims(body)
		if err != nil {
			t.Fatalf("re-encoded claims do not decode: %v\n%s", err, body)
		}
		if !sameClaims(c, c2) {
			t.Fatalf("round trip changed the claims:\n%+v\n%+v", c, c2)
		}
	})
}

// fixedDetails lists every client-facing claim detail; FuzzClaims checks nothing else reaches a client.
var fixedDetails = []string{
	"payload is not a JSON object with claims of the right types",
	"budget has a wrong type or an unknown field",
	"permissions has a wrong type or an unknown field",
	"sdkConfig must be a JSON object",
	templateDetail,
	"iss must be 1 to 256 bytes without control characters",
	"sub must be 1 to 256 bytes without control characters",
	"exp is required",
	"exp is out of range",
	"nbf is out of range",
	"iat is out of range",
	"aud entries must be 1 to 256 bytes without control characters",
	"budget is set but HasBudget is false",
	"budget.ai must not be negative",
	"budget.compute must not be negative",
	"budget.window must be one of hour, day, week, month, lifetime",
	"budget.windowStart is required unless budget.window is lifetime",
	"budget.windowStart is out of range",
	"permissions.maxTurns must not be negative",
	"permissions.model must be at most 256 bytes without control characters",
	"permissions tool names must be 1 to 256 bytes without control characters",
}

func sameClaims(a, b *Claims) bool {
	x, y := *a, *b
	for _, p := range []*Claims{&x, &y} {
		p.ExpiresAt = p.ExpiresAt.Truncate(time.Second)
		p.IssuedAt = p.IssuedAt.Truncate(time.Second)
		p.NotBefore = p.NotBefore.Truncate(time.Second)
		var buf bytes.Buffer
		json.HTMLEscape(&buf, p.SDKConfig) // encoding/json escapes <, > and & when re-encoding
		if p.SDKConfig != nil {
			p.SDKConfig = buf.Bytes()
		}
	}
	if !x.Budget.WindowStart.Equal(y.Budget.WindowStart) {
		return false
	}
	x.Budget.WindowStart, y.Budget.WindowStart = time.Time{}, time.Time{}
	return x.ExpiresAt.Equal(y.ExpiresAt) && x.IssuedAt.Equal(y.IssuedAt) && x.NotBefore.Equal(y.NotBefore) &&
		reflect.DeepEqual(withoutTimes(x), withoutTimes(y))
}

func withoutTimes(c Claims) Claims {
	c.ExpiresAt, c.IssuedAt, c.NotBefore = time.Time{}, time.Time{}, time.Time{}
	return c
}
