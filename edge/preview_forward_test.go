package edge

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	previewsqlite "github.com/warren-mesh/warren/internal/previews/sqlite"
	"github.com/warren-mesh/warren/internal/wire"
)

// A preview URL of a sandbox region a holds, reached through region b's edge: b verifies it against the
// store both regions share and forwards the request over the mesh to a, whose edge relays it to the real
// runner (under bubblewrap, the server in the sandbox's network namespace), HTTP and a WebSocket echo (the
// upgraded connection carried by the mesh stream).
func TestForwardPreview(t *testing.T) {
	rn := realRunner(t)
	store, err := previewsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "previews.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	pvSrv := httptest.NewUnstartedServer(nil) // b's preview origin
	t.Cleanup(pvSrv.Close)
	pathBase := "http://" + pvSrv.Listener.Addr().String()
	_, b, _ := twoRegions(t, rn, live, func(c *Config) { c.Previews = &PreviewConfig{Store: store, PathMode: true, PathBase: pathBase} })
	pvSrv.Config.Handler = b.edge.PreviewHandler()
	pvSrv.Start()
	ctx := testCtx(t)
	call := func(method, path, body string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		base := b.url
		if strings.HasPrefix(path, "/preview/") {
			base = pathBase
		}
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
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
	// The tenant's server of internal/devstack's preview tests: HTTP and a WebSocket echo.
	src, err := os.ReadFile(filepath.Join("..", "internal", "devstack", "testdata", "previewserver.py"))
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := call("PUT", "/v1/sandbox/files?path=srv.py", string(src), alice...); resp.StatusCode >= 300 {
		t.Fatalf("upload the server through b: %d %s", resp.StatusCode, body)
	}
	resp, body := call("POST", "/v1/sandbox/procs", `{"command":"python3","args":["srv.py","18792"]}`, alice...)
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
		if resp, body := call("GET", "/preview/"+pv.Token+"/", "", hdr...); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"path": "/"`) {
			t.Fatalf("public=%v through b: %d %s", public, resp.StatusCode, body)
		}
		if !public {
			if resp, _ := call("GET", "/preview/"+pv.Token+"/", ""); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("private without a token through b: %d", resp.StatusCode)
			}
			continue
		}
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(pathBase, "http")+"/preview/"+pv.Token+"/ws", nil)
		if err != nil {
			t.Fatalf("a WebSocket through b: %v", err)
		}
		for _, msg := range []string{"one", strings.Repeat("x", 5000)} {
			if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			if typ, got, err := conn.Read(ctx); err != nil || typ != websocket.MessageText || string(got) != "echo: "+msg {
				t.Fatalf("echo through b: %v %.40q %v", typ, got, err)
			}
		}
		conn.Close(websocket.StatusNormalClosure, "")
	}
}
