package token_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/warren-mesh/warren/internal/token"
)

// claimCase is one entry of testdata/claims.json: claims (exp added when absent) and whether the edge
// accepts a token carrying them. The TypeScript SDK's mintToken is tested against the same file
// (sdk/js/test/token.test.ts), so what it mints and what it refuses stay the edge's rules.
type claimCase struct {
	Name   string          `json:"name"`
	OK     bool            `json:"ok"`
	Claims json.RawMessage `json:"claims"`
}

func loadClaimCases(t *testing.T) []claimCase {
	t.Helper()
	b, err := os.ReadFile("testdata/claims.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []claimCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// withExp appends an exp an hour after testNow to claims that have none, keeping the other claims' order
// and spelling (the order decides which of two spellings of a claim Go's decoder keeps).
func withExp(t *testing.T, claims json.RawMessage) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(claims, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["exp"]; ok {
		return claims
	}
	exp := testNow.Unix() + 3600
	body := bytes.TrimSuffix(bytes.TrimSpace(claims), []byte("}"))
	return append(body, []byte(`,"exp":`+jsonInt(exp)+`}`)...)
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestVerifyClaimCases(t *testing.T) {
	e := newEnv(t, t.TempDir())
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return testNow }, CacheTTL: -1})
	enc := base64.RawURLEncoding
	for _, c := range loadClaimCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			signing := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT","kid":"`+e.v3.ID+`"}`)) + "." +
				enc.EncodeToString(withExp(t, c.Claims))
			sig, err := jwt.SigningMethodHS256.Sign(signing, e.v3.Secret)
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(context.Background(), signing+"."+enc.EncodeToString(sig))
			if got := err == nil; got != c.OK {
				t.Fatalf("claims %s: accepted %v, want %v (err %v)", c.Claims, got, c.OK, err)
			}
		})
	}
}
