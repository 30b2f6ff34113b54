package edge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
)

// BenchmarkHops is what each hop adds, in one run on loopback: a ping (one message echoed on an open agent
// channel) and an exec (one REST request with a tiny streamed answer), straight to the runner, through the
// edge of the runner's region (a), and through another region's edge (b) forwarded over the mesh to a's
// edge; and, for the floor of any such hop, through a bare httputil.ReverseProxy on loopback (proxy); with
// 1 and with 500 sessions at once (a user each, each doing its requests one after the other).
// Each reports p50 and p99 per request; the difference between two targets is what a hop adds. The edges
// verify real tokens (HS256, one minted per user) with the verifier and the issuer key source of warren dev
// (a secrets file behind a secrets.Cache), so the edge's figure includes token verification.
//
//	go test ./edge -run XXX -bench Hops -benchtime 2000x
func BenchmarkHops(bm *testing.B) {
	rn := newMeshRunner(bm)
	close(rn.release)
	keys, err := file.Open(filepath.Join(bm.TempDir(), file.DefaultFileName))
	if err != nil {
		bm.Fatal(err)
	}
	key, _, err := keys.EnsureIssuer("acme")
	if err != nil {
		bm.Fatal(err)
	}
	verifier := token.NewVerifier(secrets.NewCache(keys, secrets.CacheOptions{}), token.VerifierOptions{})
	a, b, _ := twoRegions(bm, rn, live, func(c *Config) { c.Verifier = verifier })
	ctx := context.Background()
	tokens := make([]string, 500)
	for i := range tokens {
		if tokens[i], err = token.Mint(key, token.Claims{Issuer: "acme", Subject: fmt.Sprintf("user%d", i),
			IssuedAt: time.Now(), ExpiresAt: time.Now().Add(24 * time.Hour)}); err != nil {
			bm.Fatal(err)
		}
	}
	for _, r := range []*meshRegion{a, b} { // both admit as the other does, so targets differ by hops alone
		if _, err := r.ledger.PutIssuer(ctx, "acme", ""); err != nil && r == a {
			bm.Fatal(err)
		}
		cur, _ := r.ledger.GetQuota(ctx, billing.QuotaKey{Issuer: "acme"})
		if _, err := r.ledger.PutQuota(ctx, billing.QuotaKey{Issuer: "acme"}, billing.Quota{AIMicros: -1, ComputeSeconds: -1,
			Window: billing.Day, MaxConcurrentSessions: 5, SandboxQuota: billing.SandboxQuota{MaxProcesses: 77}}, cur.Revision); err != nil {
			bm.Fatal(err)
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}
	// The floor of a hop: a bare reverse proxy (no auth, no admission; flushing every write and full duplex
	// as the edge's relay) on loopback in front of the same runner: what the edge adds beyond it is Warren's
	// own work.
	runnerURL, err := url.Parse(rn.url)
	if err != nil {
		bm.Fatal(err)
	}
	bare := httputil.NewSingleHostReverseProxy(runnerURL)
	bare.FlushInterval = -1
	bare.Transport = &http.Transport{MaxIdleConnsPerHost: 1000}
	floor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Full duplex, as the edge's relay: else the server closes the request body once the runner's
		// answer starts, which races the transport's last read of it and drops the runner connection.
		_ = http.NewResponseController(w).EnableFullDuplex()
		bare.ServeHTTP(w, r)
	}))
	bm.Cleanup(floor.Close)
	targets := []struct{ name, url string }{{"direct", rn.url}, {"proxy", floor.URL}, {"edge", a.url}, {"forwarded", b.url}}
	auth := func(target string, user int) string {
		if target == "direct" || target == "proxy" {
			return "Bearer runner-key"
		}
		return "Bearer " + tokens[user]
	}
	exec := func(url, auth string) error {
		req, _ := http.NewRequest("POST", url+"/v1/sandbox/exec", strings.NewReader("x"))
		req.Header.Set("Authorization", auth)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), "data: 0\n\n") {
			return fmt.Errorf("%s: %d %q %v", url, resp.StatusCode, body, err)
		}
		return nil
	}
	dial := func(target, url string, user int) (*websocket.Conn, error) {
		path := "/ws"
		if target == "direct" || target == "proxy" {
			path = "/v1/agent"
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(url, "http")+path, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {auth(target, user)}}, HTTPClient: client,
		})
		if err == nil {
			err = c.Write(ctx, websocket.MessageText, []byte(`{"type":"init"}`))
		}
		return c, err
	}
	ping := func(c *websocket.Conn) error {
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"user","message":{"role":"user","content":"ping"}}`)); err != nil {
			return err
		}
		_, data, err := c.Read(ctx)
		if err == nil && !strings.Contains(string(data), `"content":"ping"`) {
			err = fmt.Errorf("echo %s", data)
		}
		return err
	}
	for _, kind := range []string{"ping", "exec"} {
		for _, sessions := range []int{1, 500} {
			for _, tg := range targets {
				bm.Run(fmt.Sprintf("%s/sessions=%d/%s", kind, sessions, tg.name), func(bm *testing.B) {
					// One worker per session; each first opens its channel (ping) or warms its connection
					// (exec), then does its share of the b.N requests.
					conns := make([]*websocket.Conn, sessions)
					for i := range sessions {
						var err error
						if kind == "ping" {
							if conns[i], err = dial(tg.name, tg.url, i); err == nil {
								err = ping(conns[i])
							}
						} else {
							err = exec(tg.url, auth(tg.name, i))
						}
						if err != nil {
							bm.Fatal(err)
						}
					}
					defer func() {
						for _, c := range conns {
							if c != nil {
								c.Close(websocket.StatusNormalClosure, "")
							}
						}
					}()
					lat := make([][]time.Duration, sessions)
					errs := make(chan error, sessions)
					bm.ResetTimer()
					var wg sync.WaitGroup
					for i := range sessions {
						share := bm.N / sessions
						if i < bm.N%sessions {
							share++
						}
						wg.Go(func() {
							for range share {
								start := time.Now()
								var err error
								if kind == "ping" {
									err = ping(conns[i])
								} else {
									err = exec(tg.url, auth(tg.name, i))
								}
								if err != nil {
									errs <- err
									return
								}
								lat[i] = append(lat[i], time.Since(start))
							}
						})
					}
					wg.Wait()
					bm.StopTimer()
					close(errs)
					if err := <-errs; err != nil {
						bm.Fatal(err)
					}
					all := slices.Concat(lat...)
					slices.Sort(all)
					bm.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
					bm.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
				})
			}
		}
	}
}
