package runner_test

import (
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// TestGitBundlesBounded tries to fill the host's disk with bundle spools: each bundle is spooled to the
// runner's state directory (outside the workspace's quota) and kept until its download ends, so a tenant
// that asks for bundles and never reads them held one spool per request. A bundle larger than the
// socket buffers keeps its download (and so its spool) open while the body is unread; past the bound
// the next bundle is resource_exhausted, and once a download ends a bundle can be made again.
func TestGitBundlesBounded(t *testing.T) {
	h := startRunner(t)
	h.git(t, "init", wire.GitInitRequest{Path: "repo"})
	h.exec(t, wire.ExecRequest{Command: "head -c 48000000 /dev/urandom > big.bin", Cwd: "repo"})
	h.git(t, "commit", wire.GitCommitRequest{Path: "repo", Message: "big", All: true})
	q := "/v1/sandbox/git/bundle?" + url.Values{"path": {"repo"}}.Encode()
	var held []*http.Response
	defer func() {
		for _, r := range held {
			r.Body.Close()
		}
	}()
	for range 2 {
		resp := h.do(t, http.MethodGet, q, nil)
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("bundle: %d %s", resp.StatusCode, b)
		}
		held = append(held, resp) // its body unread: the download, and the spool, stay
	}
	third := h.do(t, http.MethodGet, q, nil)
	if third.StatusCode == http.StatusOK {
		third.Body.Close()
		t.Fatal("a third bundle was spooled while two downloads are open")
	}
	wantError(t, third, wire.ResourceExhausted)
	if _, err := io.Copy(io.Discard, held[0].Body); err != nil {
		t.Fatal(err)
	}
	held[0].Body.Close()
	held = held[1:]
	// The slot is given back when the handler returns, just after the body's last byte: wait for it by
	// asking again (a refusal while it is being given back is resource_exhausted, anything else fails).
	for {
		resp := h.do(t, http.MethodGet, q, nil)
		if resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		wantError(t, resp, wire.ResourceExhausted)
	}
}
