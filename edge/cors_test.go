package edge

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// corsEdge is an edge with the allowlist origins (nil: no CORS config) on a test server.
func corsEdge(t *testing.T, origins []string) string {
	t.Helper()
	ledger, d := regionsFixture(t)
	cfg := Config{Region: "r1", Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Directory: d,
		Metrics: prometheus.NewRegistry()}
	if origins != nil {
		cfg.CORS = &CORS{Origins: origins}
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func corsDo(t *testing.T, method, url string, h map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func preflight(origin, method string) map[string]string {
	return map[string]string{"Origin": origin, "Access-Control-Request-Method": method,
		"Access-Control-Request-Headers": "authorization,content-type"}
}

// A preflight from an allowed origin is answered 204 with the origin, the methods and the headers the SDKs
// send, on GET /v1/regions and every sandbox API path, before any token is asked for (a preflight carries
// none); never with Access-Control-Allow-Credentials (tokens are bearer headers, not cookies). A refused
// origin's preflight is 403 with no Access-Control-* header, so the browser refuses the request.
func TestCORSPreflight(t *testing.T) {
	url := corsEdge(t, []string{"https://app.example", "http://127.0.0.1:3000"})
	paths := map[string]string{"/v1/regions": "GET", "/v1/sandbox/exec": "POST", "/v1/sandbox/files?path=a": "PUT",
		"/v1/sandbox/files/list?path=.": "GET", "/v1/sessions": "GET", "/v1/sessions/s1": "DELETE"}
	for path, method := range paths {
		for _, origin := range []string{"https://app.example", "http://127.0.0.1:3000"} {
			resp := corsDo(t, http.MethodOptions, url+path, preflight(origin, method))
			h := resp.Header
			if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != origin {
				t.Fatalf("%s %s from %s: %d, ACAO %q", method, path, origin, resp.StatusCode, h.Get("Access-Control-Allow-Origin"))
			}
			if !strings.Contains(h.Get("Access-Control-Allow-Methods"), method) ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Content-Type") {
				t.Fatalf("%s %s: methods %q headers %q", method, path, h.Get("Access-Control-Allow-Methods"), h.Get("Access-Control-Allow-Headers"))
			}
			if h.Get("Access-Control-Allow-Credentials") != "" || h.Get("Access-Control-Max-Age") == "" || !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
				t.Fatalf("%s %s: credentials %q max-age %q vary %q", method, path, h.Get("Access-Control-Allow-Credentials"), h.Get("Access-Control-Max-Age"), h.Values("Vary"))
			}
		}
		for _, origin := range []string{"https://evil.example", "null", "https://app.example.evil.example", "http://app.example", "https://127.0.0.1:3000"} {
			resp := corsDo(t, http.MethodOptions, url+path, preflight(origin, method))
			if resp.StatusCode != http.StatusForbidden || hasACHeader(resp.Header) {
				t.Fatalf("refused origin %s, %s %s: %d, headers %v", origin, method, path, resp.StatusCode, resp.Header)
			}
		}
	}
}

func hasACHeader(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			return true
		}
	}
	return false
}

// Answers to an allowed origin's requests carry its Access-Control-Allow-Origin and the exposed headers,
// errors included (a page reads the typed unauthenticated error); a refused origin's answers carry none, so
// its page cannot read them. Paths outside the API (the agent channel, health) never carry CORS headers.
func TestCORSHeaders(t *testing.T) {
	url := corsEdge(t, []string{"https://app.example"})
	ok := map[string]string{"Origin": "https://app.example", "Authorization": "Bearer u1"}
	resp := corsDo(t, http.MethodGet, url+"/v1/regions", ok)
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id") {
		t.Fatalf("regions: %d %v", resp.StatusCode, resp.Header)
	}
	resp = corsDo(t, http.MethodGet, url+"/v1/sandbox/files?path=a", map[string]string{"Origin": "https://app.example"})
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("files without a token: %d %v", resp.StatusCode, resp.Header)
	}
	resp = corsDo(t, http.MethodGet, url+"/v1/regions", map[string]string{"Origin": "https://evil.example", "Authorization": "Bearer u1"})
	if resp.StatusCode != 200 || hasACHeader(resp.Header) {
		t.Fatalf("refused origin: %d %v", resp.StatusCode, resp.Header)
	}
	for _, p := range []string{"/healthz", "/readyz", "/ws"} {
		if resp := corsDo(t, http.MethodGet, url+p, ok); hasACHeader(resp.Header) {
			t.Fatalf("%s: %v", p, resp.Header)
		}
	}
	// A same-origin or non-browser request (no Origin) is untouched.
	if resp := corsDo(t, http.MethodGet, url+"/v1/regions", map[string]string{"Authorization": "Bearer u1"}); resp.StatusCode != 200 || hasACHeader(resp.Header) {
		t.Fatalf("no origin: %d %v", resp.StatusCode, resp.Header)
	}
}

// "*" allows every origin with the literal "*" (no credentials, so no need to echo); without a CORS
// configuration every preflight is refused and no answer carries CORS headers.
func TestCORSAnyAndNone(t *testing.T) {
	url := corsEdge(t, []string{"*"})
	resp := corsDo(t, http.MethodOptions, url+"/v1/sandbox/exec", preflight("https://whoever.example", "POST"))
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("any: %d %v", resp.StatusCode, resp.Header)
	}
	url = corsEdge(t, nil)
	resp = corsDo(t, http.MethodOptions, url+"/v1/sandbox/exec", preflight("https://whoever.example", "POST"))
	if resp.StatusCode != http.StatusForbidden || hasACHeader(resp.Header) {
		t.Fatalf("none: %d %v", resp.StatusCode, resp.Header)
	}
	resp = corsDo(t, http.MethodGet, url+"/v1/regions", map[string]string{"Origin": "https://whoever.example", "Authorization": "Bearer u1"})
	if hasACHeader(resp.Header) {
		t.Fatalf("none: %v", resp.Header)
	}
}

func TestParseCORSOrigins(t *testing.T) {
	got, err := ParseCORSOrigins(" https://App.Example , http://127.0.0.1:3000/,*,")
	if err != nil || strings.Join(got, " ") != "https://app.example http://127.0.0.1:3000 *" {
		t.Fatalf("%q %v", got, err)
	}
	if got, err := ParseCORSOrigins(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q %v", got, err)
	}
	for _, bad := range []string{"app.example", "ftp://x", "https://x/path", "https://u@x", "https://x?q", "https://"} {
		if _, err := ParseCORSOrigins(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzCORSOrigin: whatever Origin a page sends, the edge's Access-Control-Allow-Origin is "*" (allowlist
// "*"), empty, or an allowlisted origin (up to case): a hostile Origin is never reflected.
func FuzzCORSOrigin(f *testing.F) {
	for _, s := range []string{"https://app.example", "HTTPS://APP.EXAMPLE", "null", "", "https://app.example\r\nX: y", "https://app.example.evil"} {
		f.Add(s)
	}
	list := &CORS{Origins: []string{"https://app.example", "http://127.0.0.1:3000"}}
	anyOrigin := &CORS{Origins: []string{"*"}}
	f.Fuzz(func(t *testing.T, origin string) {
		if v, ok := list.allows(origin); ok && !strings.EqualFold(v, "https://app.example") && !strings.EqualFold(v, "http://127.0.0.1:3000") {
			t.Fatalf("%q reflected as %q", origin, v)
		} else if !ok && v != "" {
			t.Fatalf("refused with %q", v)
		}
		if v, ok := anyOrigin.allows(origin); ok && v != "*" {
			t.Fatalf("any: %q", v)
		}
	})
}
