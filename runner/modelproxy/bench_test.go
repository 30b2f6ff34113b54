package modelproxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/modelserver"
)

// BenchmarkProxyPlain is one streamed "plain" answer, straight from the model server and through the
// proxy (reserve and settle in a SQLite ledger on disk, with and without a limit). The difference is the
// proxy's overhead per call. ttfb-ns/op is the time to the first byte of the answer.
func BenchmarkProxyPlain(b *testing.B) {
	e := startEnv(b, modelserver.Options{})
	payload := body("claude-sonnet-4-5", 1024, true)
	for _, bc := range []struct {
		name, base, token string
	}{
		{"direct", e.msURL, "direct-key"},
		{"proxy-unlimited", e.url, e.proxy.OpenSession("unlimited", acct, -1)},
		{"proxy-limited", e.url, e.proxy.OpenSession("limited", acct, 1<<50)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
			defer client.CloseIdleConnections()
			var ttfb time.Duration
			for b.Loop() {
				ttfb += call(b, client, bc.base, bc.token, payload)
			}
			b.ReportMetric(float64(ttfb.Nanoseconds())/float64(b.N), "ttfb-ns/op")
		})
	}
}

// call posts one request and reads the whole answer; it returns the time to the first byte.
func call(b *testing.B, client *http.Client, base, token, payload string) time.Duration {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(payload))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("X-Api-Key", token)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set(modelserver.HeaderScenario, "plain")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	one := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, one); err != nil {
		b.Fatal(err)
	}
	ttfb := time.Since(start)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return ttfb
}
