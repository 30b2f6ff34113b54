package runner_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/warren-mesh/warren/internal/previews"
	"github.com/warren-mesh/warren/runner"
)

// A visitor of a preview attacks the tenant's server through the forwarding headers it trusts: the edge
// relays the visitor's own headers, and a server (or a cache in front of it) that believes X-Forwarded-* or
// Forwarded builds its links and redirects from them. The server sees only what the edge said (the public
// host and scheme, and a path-based URL's prefix) and none of the visitor's: X-Forwarded-Proto and -Host are
// the edge's, and a visitor's X-Forwarded-Prefix (the edge sets none for a preview host), Forwarded, other
// X-Forwarded-* header, or client address a CDN would set (X-Real-IP, True-Client-IP, CF-Connecting-IP…,
// which a server behind one trusts for access rules and rate limits) does not reach it.
func TestPreviewForwardingHeadersAreTheEdges(t *testing.T) {
	seen := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	// The host's loopback stands for the sandbox's (a development runner): what is relayed is the same.
	h := startRunner(t, func(c *runner.Config) { c.HostNetwork = true; c.PreviewHostLoopback = true })
	resp := h.do(t, http.MethodGet, "/v1/preview/"+u.Port()+"/", nil,
		previews.HostHeader, "tok.preview.test", previews.ProtoHeader, "https", // as the edge sets them
		"X-Forwarded-Proto", "http", "X-Forwarded-Host", "evil.example", // the visitor's
		"X-Forwarded-Prefix", "/evil", "Forwarded", "proto=http;host=evil.example", "X-Forwarded-Port", "1",
		"X-Forwarded-For", "127.0.0.1", "X-Forwarded-Server", "evil.example", "X-Forwarded-Ssl", "off",
		"X-Real-IP", "127.0.0.1", "True-Client-IP", "127.0.0.1", "CF-Connecting-IP", "127.0.0.1",
		"CF-Visitor", `{"scheme":"http"}`, "X-Client-IP", "127.0.0.1", "X-Cluster-Client-IP", "127.0.0.1",
		"Fastly-Client-IP", "127.0.0.1", "X-Original-Forwarded-For", "127.0.0.1", "Via", "1.1 evil",
		"X-Original-URL", "/admin", "X-Rewrite-URL", "/admin", "X-Host", "evil.example")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preview: %d", resp.StatusCode)
	}
	got := <-seen
	if got.Get("X-Forwarded-Host") != "tok.preview.test" || got.Get("X-Forwarded-Proto") != "https" {
		t.Errorf("the server saw X-Forwarded-Host %q, -Proto %q; want the edge's tok.preview.test, https",
			got.Get("X-Forwarded-Host"), got.Get("X-Forwarded-Proto"))
	}
	for _, k := range []string{"X-Forwarded-Prefix", "Forwarded", "X-Forwarded-Port", "X-Forwarded-For",
		"X-Forwarded-Server", "X-Forwarded-Ssl", "X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "CF-Visitor",
		"X-Client-IP", "X-Cluster-Client-IP", "Fastly-Client-IP", "X-Original-Forwarded-For", "Via",
		"X-Original-URL", "X-Rewrite-URL", "X-Host"} {
		if v := got.Values(k); len(v) != 0 {
			t.Errorf("the visitor's %s %q reached the tenant's server", k, v)
		}
	}

	// A path-based preview's prefix is the edge's, not the visitor's.
	resp = h.do(t, http.MethodGet, "/v1/preview/"+u.Port()+"/", nil, previews.PrefixHeader, "/preview/tok",
		"X-Forwarded-Prefix", "/evil")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preview: %d", resp.StatusCode)
	}
	if got := <-seen; len(got.Values("X-Forwarded-Prefix")) != 1 || got.Get("X-Forwarded-Prefix") != "/preview/tok" {
		t.Errorf("the server saw X-Forwarded-Prefix %q, want the edge's /preview/tok", got.Values("X-Forwarded-Prefix"))
	}
}
