package edge

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	previewsqlite "github.com/warren-mesh/warren/internal/previews/sqlite"
	"github.com/warren-mesh/warren/internal/wire"
)

// A preview URL of a sandbox region a holds, reached through region b's edge: b verifies it against the
// store both regions share and forwards the request over the mesh to a, whose edge relays it to the real
// runner (under bubblewrap, the server in the sandbox's network namespace). A WebSocket to it through b is
// refused naming region a (the mesh carries no upgraded connections).
func TestForwardPreview(t *testing.T) {
	rn := realRunner(t)
	store, err := previewsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "previews.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	_, b, _ := twoRegions(t, rn, live, func(c *Config) { c.Previews = &PreviewConfig{Store: store} })
	ctx := testCtx(t)
	call := func(method, path, body string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, b.url+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, out
	}
	alice := []string{"Authorization", "Bearer alice"}
	resp, body := call("POST", "/v1/sandbox/procs", `{"command":"python3","args":["-m","http.server","18792"]}`, alice...)
	var p wire.ProcInfo
	if err := json.Unmarshal(body, &p); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("start the server through b: %d %s", resp.StatusCode, body)
	}
	if resp, body := call("POST", "/v1/sandbox/procs/"+p.ID+"/wait", `{"for":"port","port":18792}`, alice...); resp.StatusCode != http.StatusOK {
		t.Fatalf("wait for the port: %d %s", resp.StatusCode, body)
	}
	for _, public := range []bool{true, false} {
		resp, body := call("POST", "/v1/sandbox/previews", `{"port":18792,"public":`+map[bool]string{true: "true", false: "false"}[public]+`}`, alice...)
		var pv wire.Preview
		if err := json.Unmarshal(body, &pv); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("create through b: %d %s", resp.StatusCode, body)
		}
		var hdr []string
		if !public {
			hdr = alice
		}
		if resp, body := call("GET", "/preview/"+pv.Token+"/", "", hdr...); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Directory listing") {
			t.Fatalf("public=%v through b: %d %s", public, resp.StatusCode, body)
		}
		if !public {
			if resp, _ := call("GET", "/preview/"+pv.Token+"/", ""); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("private without a token through b: %d", resp.StatusCode)
			}
			continue
		}
		resp, body = call("GET", "/preview/"+pv.Token+"/ws", "", "Connection", "Upgrade", "Upgrade", "websocket",
			"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		we := wire.ReadHTTPError(resp.StatusCode, body)
		if we.Code != wire.Unavailable || we.Details["region"] != "a" {
			t.Fatalf("a WebSocket through b: %d %s", resp.StatusCode, body)
		}
	}
}
