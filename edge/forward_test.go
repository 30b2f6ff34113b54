package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/mesh"
	"github.com/warren-mesh/warren/internal/regions"
	regionsqlite "github.com/warren-mesh/warren/internal/regions/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
)

// meshRunner is region a's runner: its agent channel echoes each user message back and, on a message whose
// content is "close", closes with 4409 and a reason; its exec streams one event, waits for the test, then
// ends. It records the grant and key of every call.
type meshRunner struct {
	url     string
	release chan struct{} // closed by the test: exec finishes
	closed  chan websocket.CloseError
	arrived chan string // the bodies of held whoami requests, as they arrive

	mu       sync.Mutex
	grants   []wire.Grant
	keys     []string
	canceled atomic.Int32 // exec requests whose context ended before they were released
}

func newMeshRunner(t testing.TB) *meshRunner {
	rn := &meshRunner{release: make(chan struct{}), closed: make(chan websocket.CloseError, 4), arrived: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent", func(w http.ResponseWriter, r *http.Request) {
		rn.record(r)
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for seq := 1; ; seq++ {
			_, data, err := c.Read(r.Context())
			if err != nil {
				var ce websocket.CloseError
				if errors.As(err, &ce) {
					rn.closed <- ce
				}
				return
			}
			var m struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			}
			_ = json.Unmarshal(data, &m)
			if strings.Contains(string(data), `"type":"init"`) {
				seq-- // the channel's init (sent before everything else) is not echoed
				continue
			}
			if m.Message.Content == "close" {
				_ = c.Close(4409, `{"code":"conflict","message":"closed by the runner"}`)
				return
			}
			out := fmt.Sprintf(`{"type":"echo","seq":%d,"content":%q}`, seq, m.Message.Content)
			if err := c.Write(r.Context(), websocket.MessageText, []byte(out)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("POST /v1/sandbox/early", func(w http.ResponseWriter, r *http.Request) {
		// Answers at once and never reads the body (net/http reads a body before the answer's head unless
		// full duplex is on), closing the connection after (golang/go#68560: a full-duplex handler leaving
		// its body unread must not keep the connection).
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Connection", "close")
		fmt.Fprint(w, "answered before the body")
		w.(http.Flusher).Flush()
	})
	mux.HandleFunc("POST /v1/sandbox/exec", func(w http.ResponseWriter, r *http.Request) {
		rn.record(r)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: stdout\ndata: %s\n\n", body)
		w.(http.Flusher).Flush()
		select {
		case <-rn.release:
		case <-r.Context().Done():
			rn.canceled.Add(1)
			return
		}
		fmt.Fprint(w, "event: exit\ndata: 0\n\n")
	})
	mux.HandleFunc("/v1/sandbox/whoami", func(w http.ResponseWriter, r *http.Request) {
		// The user the runner was granted for, and the request's own body and id: an answer that reached
		// another request, or carried another's headers, shows.
		g, _ := wire.DecodeGrant(r.Header.Get(wire.HeaderGrant))
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Who", g.User)
		w.Header().Set("X-Echo-Request-Id", r.Header.Get("X-Request-Id"))
		if r.URL.Query().Has("hold") { // answered once rn.release is closed
			rn.arrived <- string(body)
			select {
			case <-rn.release:
			case <-r.Context().Done():
				rn.canceled.Add(1)
				return
			}
		}
		if r.URL.Query().Has("big") { // an answer longer than any buffer on the way, for clients that leave early
			w.Header().Set("Content-Type", "application/octet-stream")
			for range 64 {
				fmt.Fprintf(w, "%s %s %s\n", g.User, body, strings.Repeat("x", 4096))
			}
			return
		}
		fmt.Fprintf(w, "%s %s", g.User, body)
	})
	execute := func(w http.ResponseWriter, r *http.Request) { // one-shot tasks: echoes what arrived
		rn.record(r)
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), body)
	}
	mux.HandleFunc("/v1/execute", execute)
	mux.HandleFunc("/v1/execute/", execute)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	rn.url = srv.URL
	return rn
}

func (rn *meshRunner) record(r *http.Request) {
	g, _ := wire.DecodeGrant(r.Header.Get(wire.HeaderGrant))
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.grants = append(rn.grants, g)
	rn.keys = append(rn.keys, r.Header.Get("Authorization"))
}

func (rn *meshRunner) last() (wire.Grant, string) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if len(rn.grants) == 0 {
		return wire.Grant{}, ""
	}
	return rn.grants[len(rn.grants)-1], rn.keys[len(rn.keys)-1]
}

// regionSandboxes is a region's scheduler: region a's answers its runner, b's refuses as owned by a.
type regionSandboxes struct {
	entry   registry.Entry // zero: owned by region owner
	owner   string
	ensured atomic.Int32
	forgot  atomic.Int32 // Forget calls: each would stop the user's runner
}

func (s *regionSandboxes) Ensure(_ context.Context, req SandboxRequest) (registry.Entry, error) {
	s.ensured.Add(1)
	if s.owner != "" {
		owned := &scheduler.OwnedError{Region: s.owner, Epoch: 3, Lease: time.Now().Add(time.Minute)}
		return registry.Entry{}, wire.Wrap(wire.Unavailable, owned, "this user's sandbox is served in region "+s.owner).
			WithDetails(map[string]any{"region": s.owner})
	}
	e := s.entry
	e.Issuer, e.User = req.Issuer, req.User
	return e, nil
}

func (s *regionSandboxes) Forget(context.Context, registry.Entry) { s.forgot.Add(1) }

// countingVerifier is claimsVerifier counting its calls: region a's must never be asked.
type countingVerifier struct {
	claimsVerifier
	calls atomic.Int32
}

func (v *countingVerifier) Verify(ctx context.Context, raw string) (*token.Claims, error) {
	v.calls.Add(1)
	return v.claimsVerifier.Verify(ctx, raw)
}

// meshRegion is one region of the two-region test mesh: an edge with its own ledger and mesh node.
type meshRegion struct {
	name      string
	edge      *Edge
	url       string // the edge's HTTP base URL
	node      *mesh.Node
	meshAddr  string
	ledger    *billingsqlite.Ledger
	verifier  *countingVerifier
	sandboxes *regionSandboxes
	reg       *prometheus.Registry
	// restart closes the region's mesh node (its peers are told) and starts another on the same address,
	// serving the same edge: a restarted edge process as its peers see it (its metrics are not in reg).
	restart  func()
	restarts int
}

// twoRegions is regions a and b, each an edge with a real mesh node (one dev CA) and its own ledger and
// sandboxes, sharing one region directory: a's sandboxes answer rn, b's refuse as owned by a. announce
// says how each region's edge is announced (nil: not at all).
func twoRegions(t testing.TB, rn *meshRunner, announce func(r *meshRegion) *regions.Edge, mods ...func(*Config)) (a, b *meshRegion, dir *regionsqlite.Directory) {
	t.Helper()
	ctx := context.Background()
	tmp := t.TempDir()
	dir, err := regionsqlite.New(ctx, regionsqlite.Config{Path: filepath.Join(tmp, "regions.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	ca, err := mesh.DevCA(filepath.Join(tmp, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string, sb *regionSandboxes) *meshRegion {
		r := &meshRegion{name: name, sandboxes: sb, verifier: &countingVerifier{claimsVerifier: claimsVerifier{issuer: "acme"}}, reg: prometheus.NewRegistry()}
		if r.ledger, err = billingsqlite.New(ctx, billingsqlite.Config{Path: filepath.Join(tmp, name+"-ledger.db")}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.ledger.Close() })
		var ed *Edge
		// start starts this region's mesh node listening on addr; the node is closed at the test's end.
		start := func(addr string) (*mesh.Node, net.Addr) {
			var reg prometheus.Registerer = r.reg
			if r.restarts > 0 {
				reg = prometheus.NewRegistry() // r.reg has the first node's metrics
			}
			node, err := mesh.New(mesh.Config{
				Region: name, Certificate: ca.Source(name), Roots: ca.Roots(), DialAddr: "127.0.0.1:0",
				KnownRegions: func(region string) bool { return ed.KnownRegion(region) },
				Handler:      func(ctx context.Context, from string, s *mesh.Stream) { ed.ServeMesh(ctx, from, s) },
				Metrics:      reg,
			})
			if err != nil {
				t.Fatal(err)
			}
			la, err := node.Listen(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = node.Close(cctx)
			})
			return node, la
		}
		node, addr := start("127.0.0.1:0")
		cfg := Config{
			Region: name, Verifier: r.verifier, Sandboxes: sb, Ledger: r.ledger, Quotas: r.ledger, Sessions: r.ledger.Sessions(),
			Directory: dir, Mesh: node, Metrics: r.reg,
			Rates: Rates{ConnectsPerUser: -1, ConnectsPerIssuer: -1, PromptsPerUser: -1, PromptsPerIssuer: -1},
		}
		for _, m := range mods {
			m(&cfg)
		}
		ed, err = New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.restart = func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.node.Close(cctx); err != nil {
				t.Fatal(err)
			}
			r.restarts++
			r.node, _ = start(r.meshAddr)
		}
		srv := httptest.NewServer(ed.Handler())
		t.Cleanup(srv.Close)
		r.edge, r.node, r.meshAddr, r.url = ed, node, addr.String(), srv.URL
		return r
	}
	a = mk("a", &regionSandboxes{entry: registry.Entry{Epoch: 3, Region: "a", Addr: strings.TrimPrefix(rn.url, "http://"), Key: "runner-key"}})
	b = mk("b", &regionSandboxes{owner: "a"})
	// b admits alice under a quota whose sandbox limits only b's ledger knows: the runner's grant shows
	// whose admission it carries.
	if _, err := b.ledger.PutIssuer(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.PutQuota(ctx, billing.QuotaKey{Issuer: "acme"}, billing.Quota{AIMicros: -1, ComputeSeconds: -1,
		Window: billing.Day, MaxConcurrentSessions: 5, SandboxQuota: billing.SandboxQuota{MaxProcesses: 77}}, 0); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*meshRegion{a, b} {
		if e := announce(r); e != nil {
			if err := dir.Announce(ctx, *e, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b, dir
}

// live announces r's edge as serving, at its mesh address.
func live(r *meshRegion) *regions.Edge {
	return &regions.Edge{Region: r.name, ID: r.name + "-1", URL: r.url, Mesh: r.meshAddr}
}

func dialWS(t *testing.T, base, user string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + user}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	sendInit(t, c)
	return c
}

// sendInit opens an agent channel: nothing is admitted before its init.
func sendInit(t *testing.T, c msgConn) {
	t.Helper()
	if err := c.Write(testCtx(t), websocket.MessageText, []byte(`{"type":"init"}`)); err != nil {
		t.Fatal(err)
	}
}

func say(t *testing.T, c msgConn, content string) {
	t.Helper()
	msg := fmt.Sprintf(`{"type":"user","message":{"role":"user","content":%q}}`, content)
	if err := c.Write(testCtx(t), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// An agent channel reaching b for a user a holds is forwarded over the mesh to a's edge, which relays it to
// a's runner: messages flow both ways, the runner receives the grant b admitted (its quota's limits) with
// a's runner key, b holds the one session lease and a neither verifies, admits nor leases anything; the
// runner's close code and reason reach the client through both edges.
func TestForwardAgentChannel(t *testing.T) { forwardAgentChannel(t, transportWebSocket) }

// forwardAgentChannel is TestForwardAgentChannel with a client of transport (the metric of its
// connections counts it).
func forwardAgentChannel(t *testing.T, transport string) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	var c msgConn
	if transport == transportWebTransport {
		c = dialWT(t, serveWT(t, b), "alice")
	} else {
		c = dialWS(t, b.url, "alice")
	}
	for i, content := range []string{"hello", "again"} {
		say(t, c, content)
		_, data, err := c.Read(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"type":"echo","seq":%d,"content":%q}`, i+1, content); string(data) != want {
			t.Fatalf("client read %s, want %s", data, want)
		}
	}
	g, key := rn.last()
	if g.User != "alice" || g.Issuer != "acme" || g.Limits == nil || g.Limits.Processes != 77 || key != "Bearer runner-key" {
		t.Fatalf("runner got grant %+v (limits %+v) with %q, want b's admission of alice with a's runner key", g, g.Limits, key)
	}
	ctx := context.Background()
	if n, _, err := b.ledger.Sessions().Count(ctx, "acme", "alice"); err != nil || n != 1 {
		t.Fatalf("b holds %d session leases (%v), want 1", n, err)
	}
	if n, _, err := a.ledger.Sessions().Count(ctx, "acme", "alice"); err != nil || n != 0 {
		t.Fatalf("a holds %d session leases (%v), want none", n, err)
	}
	if n := a.verifier.calls.Load(); n != 0 {
		t.Fatalf("a verified %d tokens, want none (b admitted the connection)", n)
	}
	if n := b.sandboxes.ensured.Load(); n != 1 {
		t.Fatalf("b's scheduler asked %d times, want 1", n)
	}
	if got := metric(t, b.reg, "warren_edge_forwarded_total", "kind", "ws", "region", "a", "outcome", "ok"); got != 1 {
		t.Fatalf("b's warren_edge_forwarded_total{ws,a,ok} = %v, want 1", got)
	}
	if got := metric(t, a.reg, "warren_edge_forwarded_served_total", "kind", "ws", "peer", "b", "outcome", "ok"); got != 1 {
		t.Fatalf("a's warren_edge_forwarded_served_total{ws,b,ok} = %v, want 1", got)
	}
	if got := metric(t, b.reg, "warren_edge_connections_total", "transport", transport); got != 1 {
		t.Fatalf("b's warren_edge_connections_total{%s} = %v, want 1", transport, got)
	}

	say(t, c, "close")
	// The runner closed with no error message: the edge sends one from the close's reason first.
	_, data, err := c.Read(testCtx(t))
	if err != nil || string(data) != `{"payload":{"code":"conflict","message":"session conflict: closed by the runner"},"type":"error"}` {
		t.Fatalf("client read %s, %v; want the error of the runner's close first", data, err)
	}
	_, _, err = c.Read(testCtx(t))
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4409 || ce.Reason != `{"code":"conflict","message":"closed by the runner"}` {
		t.Fatalf("client read %v, want the runner's close 4409 and its reason", err)
	}
}

// A client's close reaches the runner through both edges, and b's session lease is released.
func TestForwardClientClose(t *testing.T) {
	rn := newMeshRunner(t)
	_, b, _ := twoRegions(t, rn, live)
	c := dialWS(t, b.url, "alice")
	say(t, c, "hello")
	if _, _, err := c.Read(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	select {
	case ce := <-rn.closed:
		if ce.Code != websocket.StatusNormalClosure || ce.Reason != "client closed" {
			t.Fatalf("runner saw close %v, want 1000 \"client closed\" (the edge's, as direct)", ce)
		}
	case <-testCtx(t).Done():
		t.Fatal("the runner never saw the client's close")
	}
}

// REST through b is forwarded to a's runner and streams: the exec's first event reaches the client while
// the command still runs (the runner waits for the test to have read it), then the rest follows. The
// runner sees a's key and b's grant, never the user's token.
func TestForwardExecStreams(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	req, _ := http.NewRequestWithContext(testCtx(t), "POST", b.url+"/v1/sandbox/exec", strings.NewReader(`first`))
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("exec through b: %s %v", resp.Status, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	var got []string
	for len(got) < 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, line)
	}
	if got[0] != "event: stdout\n" || got[1] != "data: first\n" {
		t.Fatalf("first event %q", got)
	}
	close(rn.release) // the first event arrived while the command still ran: it streamed
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "event: exit\ndata: 0\n\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	g, key := rn.last()
	if g.User != "alice" || g.Limits == nil || g.Limits.Processes != 77 || key != "Bearer runner-key" {
		t.Fatalf("runner got grant %+v with %q", g, key)
	}
	if a.verifier.calls.Load() != 0 {
		t.Fatal("a verified the token")
	}
	if got := metric(t, b.reg, "warren_edge_forwarded_total", "kind", "http", "region", "a", "outcome", "ok"); got != 1 {
		t.Fatalf("b's warren_edge_forwarded_total{http,a,ok} = %v, want 1", got)
	}
}

// A stream from a mesh peer whose grant frame is malformed, or names another user than the stream's
// header, is aborted before a's scheduler or runner is asked anything.
func TestForwardMalformedGrantRefused(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	good, _ := appendGrant(nil, wire.Grant{Issuer: "acme", User: "mallory", Window: "lifetime"})
	for name, frame := range map[string][]byte{
		"version":    append([]byte{9}, good[1:]...),
		"oversize":   {grantVersion, 0xff, 0xff, 0xff, 0xff},
		"not json":   {grantVersion, 0, 0, 0, 2, '{', '{'},
		"other user": good,
		"truncated":  good[:len(good)-3],
	} {
		t.Run(name, func(t *testing.T) {
			s, err := b.node.Open(testCtx(t), "a", a.meshAddr, mesh.Header{Kind: mesh.KindWebSocket, Issuer: "acme", User: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Write(frame); err != nil {
				t.Fatal(err)
			}
			if name == "truncated" {
				_ = s.CloseWrite()
			}
			_, err = io.ReadAll(s)
			if !errors.Is(err, mesh.ErrStreamReset) {
				t.Fatalf("read %v, want the stream reset", err)
			}
		})
	}
	if n := a.sandboxes.ensured.Load(); n != 0 {
		t.Fatalf("a's scheduler asked %d times for refused streams", n)
	}
	if g, _ := rn.last(); g.User != "" {
		t.Fatalf("the runner was reached with %+v", g)
	}
	if got := metric(t, a.reg, "warren_edge_forwarded_served_total", "kind", "ws", "peer", "b", "outcome", "bad_grant"); got != 5 {
		t.Fatalf("a's warren_edge_forwarded_served_total{ws,b,bad_grant} = %v, want 5", got)
	}
}

// Without a live edge of the owner region, b refuses with unavailable naming it (details.region), on the
// agent channel and over REST, so clients can go there. A draining edge of a is not live: with only a
// draining one announced (at a's working mesh address), nothing is forwarded.
func TestForwardNoLiveEdge(t *testing.T) {
	for name, announce := range map[string]func(*meshRegion) *regions.Edge{
		"none announced": func(r *meshRegion) *regions.Edge {
			if r.name == "a" {
				return nil
			}
			return live(r)
		},
		"only draining": func(r *meshRegion) *regions.Edge {
			e := live(r)
			e.Draining = r.name == "a"
			return e
		},
	} {
		t.Run(name, func(t *testing.T) {
			rn := newMeshRunner(t)
			a, b, _ := twoRegions(t, rn, announce)
			c := dialWS(t, b.url, "alice")
			_, data, err := c.Read(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				Type    string     `json:"type"`
				Payload wire.Error `json:"payload"`
			}
			if err := json.Unmarshal(data, &m); err != nil || m.Payload.Code != wire.Unavailable || m.Payload.Details["region"] != "a" {
				t.Fatalf("agent channel through b: %s, want unavailable with details.region a", data)
			}
			_, _, err = c.Read(testCtx(t))
			if websocket.CloseStatus(err) != websocket.StatusCode(wire.Unavailable.CloseCode()) {
				t.Fatalf("then %v, want closed with unavailable", err)
			}
			execRefusedFor(t, b.url, "a")
			if g, _ := rn.last(); a.sandboxes.ensured.Load() != 0 || g.User != "" {
				t.Fatal("a was reached")
			}
			if n, _, _ := b.ledger.Sessions().Count(context.Background(), "acme", "alice"); n != 0 {
				t.Fatalf("b still holds %d session leases after the refusal", n)
			}
			if got := metric(t, b.reg, "warren_edge_forwarded_total", "kind", "ws", "region", "a", "outcome", "no_edge"); got != 1 {
				t.Fatalf("b's warren_edge_forwarded_total{ws,a,no_edge} = %v, want 1", got)
			}
		})
	}
}

// A mesh address of region a that fails (here a node whose certificate b does not trust) is skipped for the
// next edge of a: with two failing entries and one good in random order, every connection still lands.
func TestForwardTriesTheNextEdge(t *testing.T) {
	rn := newMeshRunner(t)
	var bad []string
	for range 2 {
		other, err := mesh.DevCA(filepath.Join(t.TempDir(), "other-ca"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := mesh.New(mesh.Config{Region: "a", Certificate: other.Source("a"), Roots: other.Roots(),
			KnownRegions: func(string) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close(context.Background()) })
		addr, err := n.Listen(context.Background(), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, addr.String())
	}
	_, b, dir := twoRegions(t, rn, live)
	for i, addr := range bad {
		if err := dir.Announce(context.Background(), regions.Edge{Region: "a", ID: fmt.Sprintf("a-bad-%d", i), URL: "http://bad.example", Mesh: addr}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		c := dialWS(t, b.url, "alice")
		say(t, c, fmt.Sprint("hello ", i))
		if _, data, err := c.Read(testCtx(t)); err != nil || !strings.Contains(string(data), `"echo"`) {
			t.Fatalf("connection %d: %s, %v", i, data, err)
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
	if got := metric(t, b.reg, "warren_edge_forwarded_total", "kind", "ws", "region", "a", "outcome", "ok"); got != 6 {
		t.Fatalf("b's warren_edge_forwarded_total{ws,a,ok} = %v, want 6", got)
	}
}

// An error the owner region's edge meets before relaying reaches the client as it would directly, and is not
// forwarded again: a's scheduler saying region c holds the user gives the client unavailable naming c.
func TestForwardRefusalAtTheOwner(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	a.sandboxes.owner = "c" // set before any connection
	c := dialWS(t, b.url, "alice")
	_, data, err := c.Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Payload wire.Error `json:"payload"`
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Payload.Code != wire.Unavailable || m.Payload.Details["region"] != "c" {
		t.Fatalf("agent channel: %s, want unavailable with details.region c", data)
	}
	if _, _, err = c.Read(testCtx(t)); websocket.CloseStatus(err) != websocket.StatusCode(wire.Unavailable.CloseCode()) {
		t.Fatalf("then %v, want closed with unavailable", err)
	}
	execRefusedFor(t, b.url, "c")
	if got := metric(t, a.reg, "warren_edge_forwarded_served_total", "kind", "http", "peer", "b", "outcome", "refused"); got != 1 {
		t.Fatalf("a's warren_edge_forwarded_served_total{http,b,refused} = %v, want 1", got)
	}
}

func FuzzGrantFrame(f *testing.F) {
	good, _ := appendGrant(nil, wire.Grant{Issuer: "acme", User: "alice", Window: "day", AIMicros: 5, Permissions: json.RawMessage(`{"a":1}`)})
	f.Add(good)
	f.Add(good[:7])
	f.Add([]byte{grantVersion, 0, 0, 0, 0})
	f.Add([]byte{grantVersion, 0, 0, 0, 2, '{', '}'})
	h := mesh.Header{Kind: mesh.KindWebSocket, Issuer: "acme", User: "alice"}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := strings.NewReader(string(b))
		g, err := readGrant(r, h)
		if err != nil {
			if !errors.Is(err, errBadFrame) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if g.Issuer != "acme" || g.User != "alice" || !billing.Window(g.Window).Valid() {
			t.Fatalf("accepted %+v", g)
		}
		if used := len(b) - r.Len(); used > 5+maxGrantFrame {
			t.Fatalf("read %d bytes", used)
		}
		again, err := appendGrant(nil, g)
		if err != nil {
			t.Fatal(err)
		}
		if g2, err := readGrant(strings.NewReader(string(again)), h); err != nil || g2.Encode() != g.Encode() {
			t.Fatalf("round trip: %+v, %v", g2, err)
		}
	})
}

func FuzzWSFrame(f *testing.F) {
	f.Add(appendWS(nil, wsText, []byte(`{"type":"user"}`)))
	f.Add(appendWSClose(appendWS(nil, wsBinary, []byte{1, 2}), 4409, "bye"))
	f.Add([]byte{wsClose, 0, 0, 0, 2, 0x03, 0xed})
	f.Add([]byte{wsText, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := strings.NewReader(string(b))
		for {
			typ, data, err := readWS(r)
			var ce websocket.CloseError
			switch {
			case errors.As(err, &ce):
				if !sendableCloseCode(ce.Code) || len(ce.Reason) > wire.MaxCloseReason {
					t.Fatalf("accepted close %v", ce)
				}
				back := appendWSClose(nil, ce.Code, ce.Reason)
				if _, _, err := readWS(strings.NewReader(string(back))); !errors.As(err, new(websocket.CloseError)) || err.(websocket.CloseError) != ce {
					t.Fatalf("close round trip: %v", err)
				}
				return
			case err != nil:
				if !errors.Is(err, errBadFrame) {
					t.Fatalf("untyped error %v", err)
				}
				return
			}
			if len(data) > maxWSPayload || (typ != websocket.MessageText && typ != websocket.MessageBinary) {
				t.Fatalf("accepted %v of %d bytes", typ, len(data))
			}
		}
	})
}

func FuzzHeadFrame(f *testing.F) {
	good, _ := appendHead(nil, reqHead{Method: "POST", Path: "/v1/sandbox/exec?x=1", Header: http.Header{"Content-Type": {"a"}}, ContentLength: -1})
	f.Add(good)
	resp, _ := appendHead(nil, respHead{Status: 200, Header: http.Header{"X-A": {"b"}}})
	f.Add(resp)
	f.Fuzz(func(t *testing.T, b []byte) {
		var h reqHead
		if err := readHead(strings.NewReader(string(b)), &h); err == nil {
			if !strings.HasPrefix(h.Path, "/v1/sandbox/") || !validMethod(h.Method) || h.ContentLength < -1 {
				t.Fatalf("accepted %+v", h)
			}
		} else if !errors.Is(err, errBadFrame) {
			t.Fatalf("untyped error %v", err)
		}
		var rh respHead
		if err := readHead(strings.NewReader(string(b)), &rh); err == nil {
			if rh.Status < 200 || rh.Status > 599 {
				t.Fatalf("accepted %+v", rh)
			}
		} else if !errors.Is(err, errBadFrame) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

// metric is the value of the counter name with exactly labels in reg (0 when there is none).
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// rawExec starts POST /v1/sandbox/exec through the edge at url over a bare connection, sending head's
// Content-Length but only body of it.
func rawExec(t *testing.T, url, user string, contentLength int, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/sandbox/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", user, contentLength, body)
	return c
}

// readUntil reads c up to the line starting with prefix: the runner's first output.
func readUntil(t *testing.T, c net.Conn, prefix string) {
	t.Helper()
	br := bufio.NewReader(c)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no output before the runner was released: %v", err)
		}
		if strings.HasPrefix(l, prefix) {
			return
		}
	}
}

// A client that leaves a forwarded exec cancels the runner's request, as on a direct one; and a client
// whose body breaks off does not get its runner stopped (Forget): neither holds anything at the owner.
func TestForwardClientGoneCancelsTheRunnerRequest(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	c := rawExec(t, b.url, "alice", 5, "hello")
	readUntil(t, c, "data: hello")
	c.Close()
	for deadline := time.Now().Add(20 * time.Second); rn.canceled.Load() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runner's request ran on after its forwarded client left")
		}
	}

	cut := rawExec(t, b.url, "alice", 100, "0123456789")
	time.Sleep(200 * time.Millisecond)
	cut.Close()
	time.Sleep(time.Second) // the cut body reaches a as a reset stream
	if n := a.sandboxes.forgot.Load(); n != 0 {
		t.Fatalf("a cut request body stopped the user's runner (%d Forget calls)", n)
	}
}

// A forwarded answer given while the client still uploads tells it to close its connection: the rest of the
// body is cut, and a cut connection ends the context of every later request on it. A body read to its end
// is never cut, so the keep-alive requests that follow all succeed (one in a few hundred was refused
// "unavailable: context canceled" when its predecessor's finished body was cut all the same).
func TestForwardKeepAliveAfterAnswers(t *testing.T) {
	rn := newMeshRunner(t)
	close(rn.release)
	_, b, _ := twoRegions(t, rn, live)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	post := func(path string, body io.Reader) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", b.url+path, body)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	pr, pw := io.Pipe()
	go pw.Write([]byte("the first part of a body that never ends"))
	resp := post("/v1/sandbox/early", pr)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pw.Close()
	if resp.StatusCode != http.StatusOK || string(got) != "answered before the body" {
		t.Fatalf("early answer: %d %q", resp.StatusCode, got)
	}
	if !resp.Close {
		t.Fatal("an answer given while the client still uploads keeps the connection open; its cut would fail the next request")
	}

	for i := range 300 {
		resp := post("/v1/sandbox/exec", strings.NewReader("x"))
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(got), "data: 0\n\n") {
			t.Fatalf("request %d on a kept-alive connection: %d %q", i, resp.StatusCode, got)
		}
	}
}

// execRefusedFor asserts that alice's exec through the edge at url is refused 503 unavailable naming region.
func execRefusedFor(t *testing.T, url, region string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t), "POST", url+"/v1/sandbox/exec", strings.NewReader(`x`))
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var we wire.Error
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &we) != nil || we.Details["region"] != region {
		t.Fatalf("exec through %s: %d %s, want 503 with details.region %s", url, resp.StatusCode, body, region)
	}
}
