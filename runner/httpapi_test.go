package runner_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// The bearer rule (docs/PROTOCOL.md#auth-header): the scheme in any case, spaces or a tab after it, the
// key exact. /healthz tells whose sandbox this is only to the key, so it follows the same rule.
func TestRunnerBearerRule(t *testing.T) {
	h := startRunner(t)
	for _, auth := range []string{"Bearer " + h.key, "bearer " + h.key, "BEARER  " + h.key + " ", "bEaReR\t" + h.key} {
		resp := h.do(t, http.MethodGet, "/v1/sandbox/files/list", nil, "Authorization", auth)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%q: %d", auth, resp.StatusCode)
		}
		var hz runner.Health
		decode(t, h.do(t, http.MethodGet, "/healthz", nil, "Authorization", auth), http.StatusOK, &hz)
		if hz.User != "alice" {
			t.Errorf("%q: healthz %+v, want the full answer", auth, hz)
		}
	}
	for _, auth := range []string{"Bearer " + h.key[1:], "Bearer " + h.key + "x", "Bearer " + strings.ToUpper(h.key),
		"Basic " + h.key, "Bearer" + h.key, "Bearer " + h.key + " " + h.key, "Bearer ", h.key} {
		resp := h.do(t, http.MethodGet, "/v1/sandbox/files/list", nil, "Authorization", auth)
		wantError(t, resp, wire.Unauthenticated)
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%q: no WWW-Authenticate", auth)
		}
		var hz runner.Health
		decode(t, h.do(t, http.MethodGet, "/healthz", nil, "Authorization", auth), http.StatusOK, &hz)
		if hz != (runner.Health{Status: "ok"}) {
			t.Errorf("%q: healthz %+v, want only the status", auth, hz)
		}
	}
}

// Unknown paths and wrong methods are {code, message} with the words every role uses
// (docs/PROTOCOL.md#errors): not_found naming the route, invalid_argument with Allow and details.allow.
// Without the key, both are unauthenticated: a caller without it learns nothing of what exists.
func TestRunnerUnknownRoutesAreWireErrors(t *testing.T) {
	h := startRunner(t)
	for _, path := range []string{"/", "/nope", "/v1/nope", "/v1/sandbox/procs/x/nope", "/v1/sandbox/files/"} {
		we := wantError(t, h.do(t, http.MethodGet, path, nil), wire.NotFound)
		if we.Message != "the runner API has no route GET "+path {
			t.Errorf("GET %s: %q", path, we.Message)
		}
		wantError(t, h.do(t, http.MethodGet, path, nil, "Authorization", ""), wire.Unauthenticated)
	}
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/healthz", "GET"},
		{http.MethodPost, "/metrics", "GET"},
		{http.MethodPatch, "/v1/lease", "PUT"},
		{http.MethodGet, "/v1/sandbox/exec", "POST"},
		{http.MethodPut, "/v1/sandbox/procs", "GET, POST"},
		{http.MethodPost, "/v1/sandbox/procs/x", "DELETE, GET"},
	} {
		resp := h.do(t, c.method, c.path, nil)
		we := wantError(t, resp, wire.InvalidArgument)
		want := "method " + c.method + " is not allowed on " + c.path + ": use " + strings.ReplaceAll(c.allow, ", ", " or ")
		if resp.Header.Get("Allow") != c.allow || we.Message != want {
			t.Errorf("%s %s: Allow %q, %q", c.method, c.path, resp.Header.Get("Allow"), we.Message)
		}
		if allow, _ := we.Details["allow"].([]any); len(allow) != strings.Count(c.allow, ",")+1 {
			t.Errorf("%s %s: details.allow %v", c.method, c.path, we.Details["allow"])
		}
		if c.path != "/healthz" {
			wantError(t, h.do(t, c.method, c.path, nil, "Authorization", ""), wire.Unauthenticated)
		}
	}
}

// The request id rule (docs/PROTOCOL.md#request-id): a client's id of the rule is kept, any other replaced
// by one of the rule.
func TestRunnerRequestIDRule(t *testing.T) {
	h := startRunner(t)
	for sent, kept := range map[string]bool{
		"trace-1.2:3_x":          true,
		strings.Repeat("a", 64):  true,
		strings.Repeat("a", 65):  false,
		strings.Repeat("a", 128): false,
		"has space":              false,
		"semi;colon":             false,
	} {
		for _, path := range []string{"/healthz", "/nope"} {
			resp := h.do(t, http.MethodGet, path, nil, "X-Request-Id", sent)
			if got := resp.Header.Get("X-Request-Id"); (got == sent) != kept || !httpx.ValidRequestID(got) {
				t.Errorf("%s: sent %q, echoed %q", path, sent, got)
			}
		}
	}
}
