package edge

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warren-mesh/warren/billing"
)

// countedServer is an HTTP server on loopback counting the connections it accepted.
func countedServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func leanClient(t *testing.T) (*leanHop, *http.Client) {
	hop := newLeanHop(&http.Transport{})
	t.Cleanup(func() {
		hop.mu.Lock()
		defer hop.mu.Unlock()
		for _, l := range hop.idle {
			for _, lc := range l {
				lc.c.Close()
			}
		}
	})
	return hop, &http.Client{Transport: hop}
}

func leanDo(t *testing.T, c *http.Client, ctx context.Context, method, url, body string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if body == "" {
		req.Body = http.NoBody
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Requests one after the other go on one kept-alive connection, in the caller's goroutine; an informational
// answer is skipped; the answer's body streams.
func TestLeanHopReuses(t *testing.T) {
	srv, conns := countedServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/early-hints" {
			w.Header().Set("Link", "</x>")
			w.WriteHeader(http.StatusEarlyHints)
		}
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	})
	hop, c := leanClient(t)
	for i, path := range []string{"/a", "/early-hints", "/b"} {
		code, body, err := leanDo(t, c, context.Background(), "POST", srv.URL+path, "x")
		if err != nil || code != http.StatusOK || body != "POST "+path+" x" {
			t.Fatalf("request %d: %d %q %v", i, code, body, err)
		}
	}
	if n, idle := conns.Load(), hop.idleConns(srv.Listener.Addr().String()); n != 1 || idle != 1 {
		t.Fatalf("3 requests in turn: %d connections, %d idle; want 1 and 1", n, idle)
	}
}

// A client gone while the answer streams (an exec whose caller went away) closes the runner connection: the
// runner's request is cancelled, and the connection never goes back to the pool, whose next request gets a
// fresh one and a whole answer.
func TestLeanHopClientGoneMidStream(t *testing.T) {
	cancelled := make(chan struct{})
	srv, conns := countedServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: stdout\ndata: 1\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/hold" {
			<-r.Context().Done()
			close(cancelled)
			return
		}
		fmt.Fprint(w, "event: exit\ndata: 0\n\n")
	})
	hop, c := leanClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/hold", strings.NewReader("x"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || first != "event: stdout\n" {
		t.Fatalf("first event: %q %v", first, err)
	}
	cancel()
	<-cancelled // the runner saw its client go
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	addr := srv.Listener.Addr().String()
	if idle := hop.idleConns(addr); idle != 0 {
		t.Fatalf("the cancelled request's connection is idle in the pool (%d)", idle)
	}
	code, body, err := leanDo(t, c, context.Background(), "POST", srv.URL+"/exec", "x")
	if err != nil || code != http.StatusOK || !strings.HasSuffix(body, "data: 0\n\n") {
		t.Fatalf("the next request: %d %q %v", code, body, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the cancelled one is not reused)", n)
	}
}

// An answer not read to its end (closed early, or cut by the runner) never returns its connection to the
// pool: the next request on it would read the rest of the last answer.
func TestLeanHopPartialAnswerNotReused(t *testing.T) {
	srv, conns := countedServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cut": // promises 10 bytes, gives 5 and drops the connection
			w.Header().Set("Content-Length", "10")
			fmt.Fprint(w, "12345")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/long":
			fmt.Fprint(w, "part one;")
			w.(http.Flusher).Flush()
			fmt.Fprint(w, strings.Repeat("rest", 10000))
		default:
			fmt.Fprint(w, "whole")
		}
	})
	hop, c := leanClient(t)
	addr := srv.Listener.Addr().String()
	resp, err := c.Get(srv.URL + "/long")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "part one;" {
		t.Fatalf("%q %v", buf, err)
	}
	resp.Body.Close()
	if idle := hop.idleConns(addr); idle != 0 {
		t.Fatalf("an answer closed before its end left its connection idle (%d)", idle)
	}
	if _, body, err := leanDo(t, c, context.Background(), "GET", srv.URL+"/cut", ""); err == nil {
		t.Fatalf("an answer cut short read as whole: %q", body)
	}
	if idle := hop.idleConns(addr); idle != 0 {
		t.Fatalf("a cut answer left its connection idle (%d)", idle)
	}
	if code, body, err := leanDo(t, c, context.Background(), "GET", srv.URL+"/ok", ""); err != nil || body != "whole" {
		t.Fatalf("the next request: %d %q %v", code, body, err)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (none of a partial answer reused)", n)
	}
}

// rawRunner is a runner speaking HTTP/1.1 by hand: it answers each request with its method, path and body
// (keep-alive), counting the requests it received by path, and after its first answer on a connection
// either closes the connection at once (closeAfterFirst) or closes it on the second request without
// answering (dieOnSecond).
type rawRunner struct {
	ln              net.Listener
	closeAfterFirst bool
	closed          chan struct{} // a connection was closed
	mu              sync.Mutex
	got             map[string]int
	conns           int
}

func newRawRunner(t *testing.T, closeAfterFirst bool) *rawRunner {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rr := &rawRunner{ln: ln, closeAfterFirst: closeAfterFirst, got: map[string]int{}, closed: make(chan struct{}, 16)}
	t.Cleanup(func() { ln.Close() })
	go rr.accept()
	return rr
}

func (rr *rawRunner) accept() {
	for c, err := rr.ln.Accept(); err == nil; c, err = rr.ln.Accept() {
		rr.mu.Lock()
		rr.conns++
		rr.mu.Unlock()
		go rr.serve(c)
	}
}

func (rr *rawRunner) serve(c net.Conn) {
	defer func() {
		c.Close()
		rr.closed <- struct{}{}
	}()
	br := bufio.NewReader(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		rr.mu.Lock()
		rr.got[req.URL.Path]++
		rr.mu.Unlock()
		if n == 1 {
			return // died having received the request
		}
		out := fmt.Sprintf("%s %s %s", req.Method, req.URL.Path, body)
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(out), out); err != nil {
			return
		}
		if rr.closeAfterFirst {
			return // closes a kept-alive connection between requests
		}
	}
}

func (rr *rawRunner) count(path string) (int, int) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.got[path], rr.conns
}

// A runner closing a kept-alive connection between requests: the closed connection is found before it is
// used and the request (a POST with a body) goes whole on a fresh one. A runner that dies having received
// a request on a kept-alive connection: an idempotent request is sent again on a fresh connection, a POST
// is not (the runner may have acted on it): its caller gets the error, the runner got it once.
func TestLeanHopRunnerClosedKeptAlive(t *testing.T) {
	_, c := leanClient(t)
	between := newRawRunner(t, true)
	base := "http://" + between.ln.Addr().String()
	for i, path := range []string{"/one", "/two", "/three"} {
		code, body, err := leanDo(t, c, context.Background(), "POST", base+path, "payload")
		if err != nil || code != http.StatusOK || body != "POST "+path+" payload" {
			t.Fatalf("request %d after the runner closed the last connection: %d %q %v", i, code, body, err)
		}
		if n, _ := between.count(path); n != 1 {
			t.Fatalf("%s reached the runner %d times", path, n)
		}
		<-between.closed // closed before the next request takes the connection from the pool
	}

	dies := newRawRunner(t, false)
	base = "http://" + dies.ln.Addr().String()
	if _, _, err := leanDo(t, c, context.Background(), "POST", base+"/first", "x"); err != nil {
		t.Fatal(err)
	}
	if _, body, err := leanDo(t, c, context.Background(), "POST", base+"/exec", "x"); err == nil {
		t.Fatalf("a POST the runner died on was answered: %q", body)
	}
	if n, conns := dies.count("/exec"); n != 1 || conns != 1 {
		t.Fatalf("the POST reached the runner %d times on %d connections; want once, on the kept one", n, conns)
	}
	if _, _, err := leanDo(t, c, context.Background(), "POST", base+"/again", "x"); err != nil { // a fresh conn
		t.Fatal(err)
	}
	code, body, err := leanDo(t, c, context.Background(), "GET", base+"/list", "")
	if err != nil || code != http.StatusOK || body != "GET /list " {
		t.Fatalf("a GET the runner died on, sent again: %d %q %v", code, body, err)
	}
	if n, _ := dies.count("/list"); n != 2 {
		t.Fatalf("the GET reached the runner %d times, want 2 (once on the kept connection, once on a fresh one)", n)
	}
}

// Through the edge: a 48 MiB upload (a body the edge does not hold whole: it streams, by the edge's
// http.Transport) reaches the runner whole, and the plain requests around it go by the lean hop on one
// kept-alive runner connection.
func TestLeanHopEdgeUpload(t *testing.T) {
	ledger := quotaLedger(t, billing.QuotaKey{Issuer: "acme"}, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: -1})
	runner, conns := countedServer(t, func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		fmt.Fprintf(w, "%s %d %s", r.URL.Path, n, hex.EncodeToString(h.Sum(nil)))
	})
	sb := &movingSandboxes{addr: map[string]string{}, keys: map[string]string{}}
	sb.set("alice", runner.Listener.Addr().String())
	e, err := New(Config{Region: "test", Verifier: windowVerifier{}, Sandboxes: sb, Ledger: ledger, Quotas: ledger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	send := func(path string, body io.Reader) string {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, body)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	small := []byte("small")
	for i := range 3 {
		if got, want := send("/v1/sandbox/exec", strings.NewReader("small")), fmt.Sprintf("/v1/sandbox/exec 5 %s", sum(small)); got != want {
			t.Fatalf("exec %d: %q, want %q", i, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("3 execs in turn took %d runner connections, want 1", n)
	}
	big := make([]byte, 48<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	// An io.Reader of no known length: sent chunked, streamed through.
	if got, want := send("/v1/sandbox/files/upload", io.MultiReader(strings.NewReader(""), strings.NewReader(string(big)))),
		fmt.Sprintf("/v1/sandbox/files/upload %d %s", len(big), sum(big)); got != want {
		t.Fatalf("the 48 MiB upload: %q, want %q", got, want)
	}
	if got := send("/v1/sandbox/exec", strings.NewReader("small")); !strings.HasPrefix(got, "/v1/sandbox/exec 5 ") {
		t.Fatalf("exec after the upload: %q", got)
	}
}
