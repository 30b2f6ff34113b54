package edge

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/regions"
)

// lockedBuffer is a bytes.Buffer safe for the server's error log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gatedReader reads r once gate is closed.
type gatedReader struct {
	gate <-chan struct{}
	r    io.Reader
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.gate
	return g.r.Read(p)
}

// serveLogged serves h on loopback with its error log kept; close waits for every connection to end and
// answers the log.
func serveLogged(t *testing.T, h http.Handler) (url string, close func() string) {
	t.Helper()
	var logs lockedBuffer
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(&logs, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, func() string { srv.Close(); return logs.String() }
}

// A relayed request body is never read once the edge's handler has returned: net/http's server then reads
// the next request on the connection while the relay's transport still reads the body, and panics
// ("invalid concurrent Body.Read call", recovered by dropping the connection). Three ways it happened, each
// followed by a second request on the same client: a runner that answers before it read the body (the
// transport was still reading it, the client sent its end after the answer); a runner that cannot be
// reached (nothing read the body: net/http's full-duplex close read it after the handler, golang/go#68560);
// a forwarded request no edge of the owner's region can take (the same, over the mesh path). Each must
// answer, the next request must succeed, and the server must have recovered no panic.
func TestRelayBodyNeverReadAfterTheHandler(t *testing.T) {
	type setup struct {
		runnerURL string // "" a live meshRunner
		announce  func(*meshRegion) *regions.Edge
		via       func(a, b *meshRegion) *Edge
		path      string
		status    int
	}
	cases := map[string]setup{
		"early answer": {via: func(a, _ *meshRegion) *Edge { return a.edge }, path: "/v1/sandbox/early", status: http.StatusOK},
		"runner unreachable": {runnerURL: "http://127.0.0.1:1", via: func(a, _ *meshRegion) *Edge { return a.edge },
			path: "/v1/sandbox/exec", status: http.StatusServiceUnavailable},
		"forwarded, no live edge": {announce: func(r *meshRegion) *regions.Edge {
			if r.name == "a" {
				return nil
			}
			return live(r)
		}, via: func(_, b *meshRegion) *Edge { return b.edge }, path: "/v1/sandbox/exec", status: http.StatusServiceUnavailable},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rn := newMeshRunner(t)
			close(rn.release)
			if c.runnerURL != "" {
				rn.url = c.runnerURL
			}
			if c.announce == nil {
				c.announce = live
			}
			a, b, _ := twoRegions(t, rn, c.announce)
			url, stop := serveLogged(t, c.via(a, b).Handler())
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for i := range 20 {
				// The body's first part goes with the head, its end once the answer has been read (or, should the
				// request fail, after a while: the client's transport waits for its body's writer).
				release := make(chan struct{})
				var once sync.Once
				end := func() { once.Do(func() { close(release) }) }
				defer time.AfterFunc(5*time.Second, end).Stop()
				body := io.MultiReader(strings.NewReader("first part "), &gatedReader{gate: release, r: strings.NewReader("and the end")})
				req, _ := http.NewRequestWithContext(testCtx(t), "POST", url+c.path, body)
				req.Header.Set("Authorization", "Bearer alice")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Fatalf("request %d: %d %q, want %d", i, resp.StatusCode, got, c.status)
				}
				end()
				// The next one, on the same connection unless the answer said to close it.
				req, _ = http.NewRequestWithContext(testCtx(t), "POST", url+c.path, strings.NewReader("x"))
				req.Header.Set("Authorization", "Bearer alice")
				resp, err = client.Do(req)
				if err != nil {
					t.Fatalf("request %d's next: %v", i, err)
				}
				got, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Fatalf("request %d's next: %d %q, want %d", i, resp.StatusCode, got, c.status)
				}
			}
			client.CloseIdleConnections()
			if logs := stop(); strings.Contains(logs, "panic") {
				t.Fatalf("the edge's server recovered a panic:\n%s", logs)
			}
		})
	}
}
