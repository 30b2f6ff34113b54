package playground

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// fixture is the playground on a loopback test server, signing with a real file store's dev issuer key.
func fixture(t *testing.T) (*httptest.Server, *token.Verifier) {
	t.Helper()
	store, err := file.Open(filepath.Join(t.TempDir(), file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.EnsureIssuer("dev"); err != nil {
		t.Fatal(err)
	}
	key := func(ctx context.Context) (secrets.Key, error) {
		keys, err := store.IssuerKeys(ctx, "dev")
		if err != nil {
			return secrets.Key{}, err
		}
		return keys[0], nil
	}
	srv := httptest.NewServer(Handler(Config{Issuer: "dev", Key: key}))
	t.Cleanup(srv.Close)
	return srv, token.NewVerifier(store, token.VerifierOptions{})
}

func post(t *testing.T, url, body string, h map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// The page's own POST (same origin, loopback) gets a token the edge's verifier accepts, for the user it
// names, with the playground's budget.
func TestTokenMinted(t *testing.T) {
	srv, v := fixture(t)
	resp, body := post(t, srv.URL+Prefix+"token", `{"user":"alice"}`, map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	var out tokenResponse
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(context.Background(), out.Token)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if c.Issuer != "dev" || c.Subject != "alice" || out.User != "alice" || !c.HasBudget || c.Budget.AIMicros != tokenAIMicros || c.Budget.ComputeSeconds != tokenCompute {
		t.Fatalf("claims %+v, answer %+v", c, out)
	}
}

// Everything but the page itself on this machine is refused with permission_denied and no token: another
// site's page (its Origin, or Sec-Fetch-Site cross-site), a request without Origin, a DNS-rebound host name,
// a client off loopback; and GET, a bad user name, unknown fields and an oversize body are refused too.
func TestTokenRefused(t *testing.T) {
	srv, _ := fixture(t)
	u := srv.URL + Prefix + "token"
	host := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		name, body string
		h          map[string]string
		status     int
		code       wire.Code
	}{
		{"other origin", `{"user":"a"}`, map[string]string{"Origin": "http://evil.example"}, 403, wire.PermissionDenied},
		{"other port", `{"user":"a"}`, map[string]string{"Origin": "http://127.0.0.1:1"}, 403, wire.PermissionDenied},
		{"no origin", `{"user":"a"}`, nil, 403, wire.PermissionDenied},
		{"cross-site fetch", `{"user":"a"}`, map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "cross-site"}, 403, wire.PermissionDenied},
		{"dns rebinding", `{"user":"a"}`, map[string]string{"Host": "evil.example:" + strings.Split(host, ":")[1], "Origin": "http://evil.example:" + strings.Split(host, ":")[1]}, 403, wire.PermissionDenied},
		{"bad user", `{"user":"../x"}`, map[string]string{"Origin": srv.URL}, 400, wire.InvalidArgument},
		{"empty user", `{"user":""}`, map[string]string{"Origin": srv.URL}, 400, wire.InvalidArgument},
		{"unknown field", `{"user":"a","issuer":"other"}`, map[string]string{"Origin": srv.URL}, 400, wire.InvalidArgument},
		{"two objects", `{"user":"a"}{"user":"b"}`, map[string]string{"Origin": srv.URL}, 400, wire.InvalidArgument},
		{"oversize", `{"user":"a","x":"` + strings.Repeat("x", maxTokenRequest) + `"}`, map[string]string{"Origin": srv.URL}, 413, wire.PayloadTooLarge},
	}
	for _, c := range cases {
		resp, body := post(t, u, c.body, c.h)
		if resp.StatusCode != c.status || !strings.Contains(string(body), string(c.code)) || strings.Contains(string(body), "token\":") {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Fatalf("GET token: %d", resp.StatusCode)
	}
	// A wrong method is a wire error with Allow, as on every API (docs/PROTOCOL.md#errors).
	req, _ := http.NewRequest(http.MethodPut, u, strings.NewReader(`{"user":"a"}`))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if we := wire.ReadHTTPError(resp.StatusCode, b); resp.StatusCode != 400 || we.Code != wire.InvalidArgument || resp.Header.Get("Allow") == "" {
		t.Fatalf("PUT token: %d %s", resp.StatusCode, b)
	}
	// A client off loopback (a dev stack listening on every interface).
	h := Handler(Config{Issuer: "dev", Key: func(context.Context) (secrets.Key, error) { return secrets.Key{}, errors.New("not reached") }})
	req = httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080"+Prefix+"token", strings.NewReader(`{"user":"a"}`))
	req.RemoteAddr = "192.0.2.7:40000"
	req.Header.Set("Origin", "http://127.0.0.1:8080")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 403 {
		t.Fatalf("off loopback: %d %s", rec.Code, rec.Body)
	}
}

// The page and its assets are served; of the SDK directory only its modules (the placeholder is not);
// the SDK's modules are served exactly when the browser build is embedded.
func TestAssets(t *testing.T) {
	srv, _ := fixture(t)
	get := func(p string) (int, string, string) {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// No other origin's page (a tenant's preview) may frame the playground.
		if resp.StatusCode == 200 && (resp.Header.Get("Content-Security-Policy") != "frame-ancestors 'none'" || resp.Header.Get("X-Frame-Options") != "DENY") {
			t.Errorf("%s may be framed: %v", p, resp.Header)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, ct, body := get(Prefix); code != 200 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(body, `src="app.js"`) {
		t.Fatalf("page: %d %s", code, ct)
	}
	if code, ct, body := get(Prefix + "app.js"); code != 200 || !strings.Contains(ct, "javascript") || !strings.Contains(body, `import("./sdk/index.js")`) {
		t.Fatalf("app.js: %d %s", code, ct)
	}
	if code, _, _ := get(Prefix + "sdk/MISSING.txt"); code != 404 {
		t.Fatalf("placeholder served: %d", code)
	}
	if code, _, _ := get(Prefix + "sdk/"); code != 404 {
		t.Fatalf("listing served: %d", code)
	}
	code, ct, _ := get(Prefix + "sdk/index.js")
	if SDKBuilt() != (code == 200) || (code == 200 && !strings.Contains(ct, "javascript")) {
		t.Fatalf("sdk/index.js: %d %s, built %v", code, ct, SDKBuilt())
	}
}

// FuzzTokenRequest: any body is refused or yields a user the pattern allows.
func FuzzTokenRequest(f *testing.F) {
	for _, s := range []string{`{"user":"alice"}`, `{"user":""}`, `{"user":"a/b"}`, `{}`, `[]`, `{"user":"a"} x`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := parseTokenRequest(b)
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if !userRe.MatchString(req.User) || len(req.User) > 64 {
			t.Fatalf("accepted %q", req.User)
		}
	})
}
