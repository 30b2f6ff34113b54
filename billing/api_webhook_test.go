package billing_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// TestAPIWebhookSecret: GET /v1/issuers/{iss}/webhook-secret answers a registered issuer's webhook secret,
// the one the runners sign its webhooks with (runner.WebhookSecret of the same master), only to an admin,
// and never logs it.
func TestAPIWebhookSecret(t *testing.T) {
	master := []byte("operator-webhook-master-0123456789")
	e := newAPIEnvWith(t, func(c *billing.APIConfig) { c.WebhookMaster = master })
	e.call(t, "PUT", "/v1/issuers/acme", `{"name":"Acme"}`, nil)
	e.call(t, "PUT", "/v1/issuers/other", `{"name":"Other"}`, nil)

	for name, key := range map[string]string{"no key": "", "wrong key": "not-the-admin-key"} {
		r := e.send(t, request{method: "GET", path: "/v1/issuers/acme/webhook-secret", key: key})
		if we := r.err(t); r.status != http.StatusUnauthorized || we.Code != wire.Unauthenticated {
			t.Fatalf("%s: %d %s, want 401 unauthenticated", name, r.status, we.Code)
		}
		if strings.Contains(string(r.body), runner.WebhookSecret(master, "acme")) {
			t.Fatalf("%s: the refusal carries the secret", name)
		}
	}

	var got struct {
		Issuer string `json:"iss"`
		Secret string `json:"webhook_secret"`
	}
	r := e.call(t, "GET", "/v1/issuers/acme/webhook-secret", "", &got)
	if want := runner.WebhookSecret(master, "acme"); got.Issuer != "acme" || got.Secret != want {
		t.Fatalf("webhook secret: %+v, want %s", got, want)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q, want no-store", cc)
	}
	var other struct {
		Secret string `json:"webhook_secret"`
	}
	e.call(t, "GET", "/v1/issuers/other/webhook-secret", "", &other)
	if other.Secret != runner.WebhookSecret(master, "other") || other.Secret == got.Secret {
		t.Fatalf("another issuer's secret %q (acme's %q)", other.Secret, got.Secret)
	}

	e.expectError(t, "GET", "/v1/issuers/nobody/webhook-secret", "", http.StatusNotFound, wire.NotFound, "")
	e.expectError(t, "GET", "/v1/issuers/"+strings.Repeat("x", billing.MaxNameLen+1)+"/webhook-secret", "",
		http.StatusBadRequest, wire.InvalidArgument, "iss")
	e.expectError(t, "POST", "/v1/issuers/acme/webhook-secret", "", http.StatusBadRequest, wire.InvalidArgument, "") // a wrong method

	if logs := e.logs.String(); strings.Contains(logs, got.Secret) || strings.Contains(logs, other.Secret) ||
		strings.Contains(logs, string(master)) {
		t.Fatalf("a webhook secret was logged:\n%s", logs)
	}
	if !strings.Contains(e.logs.String(), "issuer webhook secret read") {
		t.Fatalf("the read is not logged (issuer only):\n%s", e.logs.String())
	}

	// A billing role without the operator's secret says so.
	bare := newAPIEnv(t)
	bare.call(t, "PUT", "/v1/issuers/acme", `{"name":"Acme"}`, nil)
	bare.expectError(t, "GET", "/v1/issuers/acme/webhook-secret", "", http.StatusServiceUnavailable, wire.Unavailable, "")
}
