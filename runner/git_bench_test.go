package runner_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// BenchmarkGitBundle: GET /v1/sandbox/git/bundle of a 1,000-commit repository (each commit changes one
// line of a file and adds one of its own), through the runner's HTTP API with git under bubblewrap: the
// whole history, and the last 100 commits since a base.
//
//	go test ./runner -run '^$' -bench BenchmarkGitBundle -benchtime 20x
func BenchmarkGitBundle(b *testing.B) {
	h := startRunner(b)
	var stream strings.Builder
	for i := 1; i <= 1000; i++ {
		msg := fmt.Sprintf("commit %d\n", i)
		counter := fmt.Sprintf("%d\n", i)
		own := fmt.Sprintf("file %d\n", i)
		fmt.Fprintf(&stream, "commit refs/heads/main\nmark :%d\ncommitter Bench <bench@example.com> %d +0000\ndata %d\n%s", i, 1700000000+i, len(msg), msg)
		if i > 1 {
			fmt.Fprintf(&stream, "from :%d\n", i-1)
		}
		fmt.Fprintf(&stream, "M 644 inline counter.txt\ndata %d\n%sM 644 inline files/f%04d.txt\ndata %d\n%s\n", len(counter), counter, i, len(own), own)
	}
	res := h.exec(b, wire.ExecRequest{Command: "git init -q -b main repo && cd repo && git fast-import --quiet && git checkout -q -f main && git rev-list --count HEAD", Stdin: stream.String()})
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "1000" {
		b.Fatalf("make the repository: %+v", res)
	}
	for _, c := range []struct{ name, base string }{{"whole", ""}, {"since100", "HEAD~100"}} {
		b.Run(c.name, func(b *testing.B) {
			q := url.Values{"path": {"repo"}}
			if c.base != "" {
				q.Set("base", c.base)
			}
			var n int64
			for b.Loop() {
				resp := h.do(b, http.MethodGet, "/v1/sandbox/git/bundle?"+q.Encode(), nil)
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("bundle: %d", resp.StatusCode)
				}
				k, err := io.Copy(io.Discard, resp.Body)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				n = k
			}
			b.ReportMetric(float64(n), "bundle-bytes")
		})
	}
}
