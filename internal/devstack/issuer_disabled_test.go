package devstack_test

import (
	"errors"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// A disabled issuer's tokens are refused by the edge: a new agent channel and a user new to the edge at
// once, a user the edge admitted a moment ago within the admission cache's TTL (1 s), GET /v1/me too;
// enabled again, they work. The issuer is disabled through the billing API, as warren admin does.
func TestDisabledIssuerIsRefused(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	admin, err := adminclient.New(adminclient.Config{URL: st.URL(), Key: st.AdminKey})
	if err != nil {
		t.Fatal(err)
	}
	nina := client(t, st, "nina").Sandbox()
	if _, err := nina.Exec(ctx, wire.ExecRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	if iss, err := admin.SetIssuerDisabled(ctx, devstack.DevIssuer, true); err != nil || !iss.Disabled {
		t.Fatalf("disable: %+v, %v", iss, err)
	}
	refused := func(err error) bool {
		var we *warren.Error
		return warren.IsCode(err, warren.CodePermissionDenied) && errors.As(err, &we) && we.Details["reason"] == "issuer_disabled"
	}
	if _, err := client(t, st, "omar").Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"}); !refused(err) {
		t.Fatalf("a new user of a disabled issuer: %v, want permission_denied issuer_disabled", err)
	}
	if _, err := client(t, st, "omar").Me(ctx); !refused(err) {
		t.Fatalf("GET /v1/me of a disabled issuer: %v", err)
	}
	if s, err := client(t, st, "nina").Dial(ctx, nil); !refused(err) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("an agent channel of a disabled issuer: %v, want permission_denied issuer_disabled", err)
	}
	waitFor(t, 10*time.Second, "the sandbox API to refuse an admitted user", func() bool {
		_, err := nina.Exec(ctx, wire.ExecRequest{Command: "true"})
		return refused(err)
	})
	if _, err := admin.SetIssuerDisabled(ctx, devstack.DevIssuer, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sandbox API to accept the issuer again", func() bool {
		_, err := nina.Exec(ctx, wire.ExecRequest{Command: "true"})
		return err == nil
	})
}
