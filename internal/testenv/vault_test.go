package testenv

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// vaultDo sends one request to srv with its root token and returns the status and the decoded body.
func vaultDo(t *testing.T, srv *VaultServer, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var b bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&b).Encode(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, srv.Addr()+"/v1/"+path, &b)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Vault-Token", srv.RootToken())
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestVault(t *testing.T) {
	srv := StartVault(t)
	if !strings.HasPrefix(srv.Addr(), "http://127.0.0.1:") || !strings.HasPrefix(srv.RootToken(), "root-") {
		t.Fatalf("address %s, token of %d bytes", srv.Addr(), len(srv.RootToken()))
	}
	// KV v2 is mounted at secret/.
	if code, _ := vaultDo(t, srv, http.MethodPost, "secret/data/x", map[string]any{"data": map[string]any{"k": "v"}}); code != http.StatusOK {
		t.Fatalf("write secret/data/x: %d", code)
	}
	code, got := vaultDo(t, srv, http.MethodGet, "secret/data/x", nil)
	if code != http.StatusOK || got["data"].(map[string]any)["data"].(map[string]any)["k"] != "v" {
		t.Fatalf("read secret/data/x: %d %v", code, got)
	}
	// Only the root token is let in.
	req, _ := http.NewRequest(http.MethodGet, srv.Addr()+"/v1/secret/data/x", nil)
	req.Header.Set("X-Vault-Token", "wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a wrong token: %d", resp.StatusCode)
	}

	srv.Stop(t)
	if srv.Running() {
		t.Fatal("running after Stop")
	}
	if resp, err := http.Get(srv.Addr() + "/v1/sys/health"); err == nil {
		resp.Body.Close()
		t.Fatal("the server answers after Stop")
	}
	srv.Start(t)
	// Same address and root token, none of the data.
	if code, _ := vaultDo(t, srv, http.MethodGet, "secret/data/x", nil); code != http.StatusNotFound {
		t.Fatalf("read after restart: %d, want 404 (a dev server starts empty)", code)
	}
	if code, _ := vaultDo(t, srv, http.MethodPost, "secret/data/x", map[string]any{"data": map[string]any{"k": "w"}}); code != http.StatusOK {
		t.Fatalf("write after restart: %d", code)
	}
}
