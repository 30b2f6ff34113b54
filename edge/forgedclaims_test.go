package edge

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// TestForgedClaimsCannotReachAnotherSandbox: end to end through the edge with the real verifier, a token the
// issuer signed for alice never reaches another user's sandbox however its claims are spelt. With
// encoding/json, {"sub":"alice",...,"Sub":"bob"} was read as bob and the edge admitted it to bob's sandbox;
// {"exp":1,"EXP":<future>} was accepted. Now the case variant is another claim (alice's sandbox), and a
// duplicate sub or an expired exp beside a future EXP is refused before any runner is asked.
func TestForgedClaimsCannotReachAnotherSandbox(t *testing.T) {
	ctx := context.Background()
	ledger, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	if _, err := ledger.PutIssuer(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	keys, err := file.Open(filepath.Join(t.TempDir(), file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	key, err := keys.CreateIssuer("acme")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string // the users whose sandbox a runner was asked for
	)
	runner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, err := wire.DecodeGrant(r.Header.Get(wire.HeaderGrant))
		if err != nil {
			http.Error(w, "bad grant", http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen = append(seen, g.User)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"entries":[]}`))
	}))
	t.Cleanup(runner.Close)
	e, err := New(Config{Region: "test", Verifier: token.NewVerifier(keys, token.VerifierOptions{}),
		Sandboxes: grantRunner{addr: strings.TrimPrefix(runner.URL, "http://")},
		Ledger:    ledger, Quotas: ledger, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)

	signed := func(payload string) string {
		t.Helper()
		seg := base64.RawURLEncoding.EncodeToString
		signing := seg([]byte(`{"alg":"HS256","typ":"JWT","kid":"`+key.ID+`"}`)) + "." + seg([]byte(payload))
		sig, err := jwt.SigningMethodHS256.Sign(signing, key.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return signing + "." + seg(sig)
	}
	list := func(tok string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/sandbox/files/list?path=.", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	exp := time.Now().Add(time.Hour).Unix()
	for _, tt := range []struct {
		name, payload string
		status        int
	}{
		{"Sub after sub", fmt.Sprintf(`{"iss":"acme","sub":"alice","exp":%d,"Sub":"bob"}`, exp), http.StatusOK},
		{"ſub after sub", fmt.Sprintf(`{"iss":"acme","sub":"alice","exp":%d,"ſub":"bob"}`, exp), http.StatusOK},
		{"sub twice", fmt.Sprintf(`{"iss":"acme","sub":"alice","sub":"bob","exp":%d}`, exp), http.StatusUnauthorized},
		{"EXP after an expired exp", fmt.Sprintf(`{"iss":"acme","sub":"alice","exp":1,"EXP":%d}`, exp), http.StatusUnauthorized},
	} {
		if got := list(signed(tt.payload)); got != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || slices.ContainsFunc(seen, func(u string) bool { return u != "alice" }) {
		t.Fatalf("runners were asked for the sandboxes of %q, want alice's twice", seen)
	}
}
