package devstack_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// A browser's GET of / on warren dev gets a page linking the playground, metrics and docs, each link
// answering; the agent channel's WebSocket upgrade and API clients on / still reach the edge (which
// answers them in its own words: unauthenticated without a token).
func TestLandingPage(t *testing.T) {
	st := startStack(t)
	get := func(path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, st.URL()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	browser := []string{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}
	resp, page := get("/", browser...)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / from a browser: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, link := range []string{"/playground/", "/metrics", "/v1/regions"} {
		if !strings.Contains(page, `href="`+link+`"`) {
			t.Errorf("the landing page does not link %s", link)
		}
		if resp, _ := get(link, browser...); resp.StatusCode != http.StatusOK {
			t.Errorf("the landing page's link %s answers %d", link, resp.StatusCode)
		}
	}
	// The agent channel's upgrade reaches the edge's WebSocket (which then refuses the missing token).
	resp, body := get("/", "Accept", "text/html", "Connection", "Upgrade", "Upgrade", "websocket",
		"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.Contains(body, "unauthenticated") {
		t.Errorf("an upgrade on / got %d %q, want the edge's WebSocket", resp.StatusCode, body)
	}
	// An API client gets the edge's typed answer.
	if resp, body := get("/", "Accept", "application/json"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Errorf("an API client on / got %d %q, want the edge's not_found", resp.StatusCode, body)
	}
	if resp, body := get("/nope", browser...); strings.Contains(body, "<html") || resp.StatusCode == http.StatusOK {
		t.Errorf("GET /nope: %d %q", resp.StatusCode, body)
	}
}
