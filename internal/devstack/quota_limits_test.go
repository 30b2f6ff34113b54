package devstack_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	warren "github.com/warren-mesh/warren/sdk"
)

// putQuota PUTs body at path of the stack's billing admin API, as a platform team would, and requires 200.
func putQuota(t *testing.T, st *devstack.Stack, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPut, st.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+st.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %d %s", path, resp.StatusCode, b)
	}
}

// A user's quota override, written through the billing admin API, sets the per-user limits that were
// runner and edge flags, end to end: max_background_processes=1 reaches the user's real runner in the
// edge's grant and refuses the second background process, and max_preview_urls=1 is enforced by the edge
// at the preview's insert and refuses the second preview, each with resource_exhausted naming the field.
// Another user of the issuer, without the override, keeps the flags' limits.
func TestQuotaOverridesPerUserLimits(t *testing.T) {
	st := startStack(t, func(c *devstack.Config) {
		c.Previews = &edge.PreviewConfig{Domain: previewDomain} // -preview-max-per-user: the default, 20
	})
	ctx := ctxT(t)
	putQuota(t, st, "/v1/quotas/"+devstack.DevIssuer+"/users/quinn", `{"ai_microdollars":-1,"compute_seconds":-1,
		"window":"lifetime","max_concurrent_sessions":-1,"max_background_processes":1,"max_preview_urls":1,"revision":0}`)
	refused := func(t *testing.T, err error, field string, limit float64, limitKey string) {
		t.Helper()
		var we *warren.Error
		if !warren.IsCode(err, warren.CodeResourceExhausted) || !errors.As(err, &we) || !strings.Contains(we.Message, field) ||
			we.Details[limitKey] != limit {
			t.Fatalf("%v (details %v), want resource_exhausted naming %s with %s %v", err, we, field, limitKey, limit)
		}
	}

	quinn := client(t, st, "quinn").Sandbox()
	if _, err := quinn.StartProcess(ctx, warren.ProcStartRequest{Command: "sleep", Args: []string{"1000"}}); err != nil {
		t.Fatal(err)
	}
	_, err := quinn.StartProcess(ctx, warren.ProcStartRequest{Command: "sleep", Args: []string{"1000"}})
	refused(t, err, "max_background_processes", 1, "limit")
	if _, err := quinn.CreatePreview(ctx, warren.PreviewRequest{Port: 18791}); err != nil {
		t.Fatal(err)
	}
	_, err = quinn.CreatePreview(ctx, warren.PreviewRequest{Port: 18792})
	refused(t, err, "max_preview_urls", 1, "max_previews")

	rhea := client(t, st, "rhea").Sandbox()
	for i := range 2 {
		if _, err := rhea.StartProcess(ctx, warren.ProcStartRequest{Command: "sleep", Args: []string{"1000"}}); err != nil {
			t.Fatalf("process %d of a user without the override: %v", i+1, err)
		}
		if _, err := rhea.CreatePreview(ctx, warren.PreviewRequest{Port: 18791 + i}); err != nil {
			t.Fatalf("preview %d of a user without the override: %v", i+1, err)
		}
	}
}
