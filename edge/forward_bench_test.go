package edge

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// BenchmarkForwardExec is one exec (a tiny streamed answer) on loopback, in one run: straight to the runner,
// through the edge of the runner's region (a), and through another region's edge (b) forwarded over the mesh
// to a's edge. Each reports p50 and p99 per request; the difference between two is what a hop adds.
//
//	go test ./edge -run XXX -bench ForwardExec -benchtime 2000x
func BenchmarkForwardExec(bm *testing.B) {
	rn := newMeshRunner(bm)
	close(rn.release)
	a, b, _ := twoRegions(bm, rn, live)
	// a admits as b does (the same issuer and quota), so edge and forwarded differ by the hop alone.
	if _, err := a.ledger.PutIssuer(context.Background(), "acme", ""); err != nil {
		bm.Fatal(err)
	}
	if _, err := a.ledger.PutQuota(context.Background(), billing.QuotaKey{Issuer: "acme"}, billing.Quota{AIMicros: -1, ComputeSeconds: -1,
		Window: billing.Day, MaxConcurrentSessions: 5, SandboxQuota: billing.SandboxQuota{MaxProcesses: 77}}, 0); err != nil {
		bm.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	exec := func(url, auth string) {
		req, _ := http.NewRequest("POST", url+"/v1/sandbox/exec", strings.NewReader("x"))
		req.Header.Set("Authorization", auth)
		resp, err := client.Do(req)
		if err != nil {
			bm.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), "data: 0\n\n") {
			bm.Fatalf("%s: %d %q %v", url, resp.StatusCode, body, err)
		}
	}
	for _, c := range []struct{ name, url, auth string }{
		{"direct", rn.url, "Bearer runner-key"},
		{"edge", a.url, "Bearer alice"},
		{"forwarded", b.url, "Bearer alice"},
	} {
		bm.Run(c.name, func(bm *testing.B) {
			exec(c.url, c.auth) // warm: connections, mesh handshake, caches
			lat := make([]time.Duration, 0, bm.N)
			for bm.Loop() {
				start := time.Now()
				exec(c.url, c.auth)
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			bm.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			bm.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
