package edge

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/mesh"
	"github.com/warren-mesh/warren/internal/wire"
)

// Forwarded requests on kept mesh streams (meshpool.go).

// whoami asks the runner behind base, as user, who it was granted for, with body and the request id id.
// It answers the status, the X-Who and echoed request id headers and the body.
func whoami(ctx context.Context, client *http.Client, method, base, query, user, id, body string) (int, string, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+"/v1/sandbox/whoami"+query, strings.NewReader(body))
	if err != nil {
		return 0, "", "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+user)
	req.Header.Set("X-Request-Id", id)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", "", "", err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Who"), resp.Header.Get("X-Echo-Request-Id"), string(got), err
}

// mustWhoami is whoami for a request that must succeed with its own answer.
func mustWhoami(t *testing.T, base, user, id, body string) {
	t.Helper()
	code, who, echoed, got, err := whoami(testCtx(t), http.DefaultClient, "POST", base, "", user, id, body)
	if err != nil || code != http.StatusOK || who != user || echoed != id || got != user+" "+body {
		t.Fatalf("%s's request %s: %d, who %q, request id %q, %q, %v", user, id, code, who, echoed, got, err)
	}
}

func acceptedStreams(t *testing.T, r *meshRegion) float64 {
	t.Helper()
	return counterValue(t, r.reg, "warren_mesh_streams_accepted_total", "ok")
}

// liveKept is how many of the streams p keeps to addr are on a live connection.
func liveKept(p *meshPool, addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, is := range p.idle[addr] {
		if is.s.Connection().Err() == nil {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Requests forwarded one after the other go on one kept stream; one whose answer the client cut is never
// kept (its stream is reset), and the next request gets its own answer on a new stream.
func TestForwardKeepsStreams(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	for i := range 5 {
		mustWhoami(t, b.url, "alice", fmt.Sprint("req-", i), fmt.Sprint("body ", i))
	}
	if n := acceptedStreams(t, a); n != 1 {
		t.Fatalf("5 requests one after the other took %v mesh streams, want 1, kept", n)
	}
	if n := b.edge.mpool.size(a.meshAddr); n != 1 {
		t.Fatalf("%d streams kept, want 1", n)
	}

	c := rawExec(t, b.url, "alice", 5, "hello") // on the kept stream
	readUntil(t, c, "data: hello")
	c.Close() // mid-answer
	waitFor(t, "the runner's request to be cancelled", func() bool { return rn.canceled.Load() == 1 })
	mustWhoami(t, b.url, "alice", "after-the-cut", "after")
	if n := acceptedStreams(t, a); n != 2 {
		t.Fatalf("%v mesh streams after a cut answer, want 2: the cut one must not be kept", n)
	}
	mustWhoami(t, b.url, "alice", "and-again", "again")
	if n := acceptedStreams(t, a); n != 2 {
		t.Fatalf("%v mesh streams, want 2", n)
	}
}

// A request whose body is streamed from the client (more than smallBody) goes on a stream of its own, ended
// after its exchange, never kept: its answer may come before the body's end, and the serving edge resets a
// stream it cannot drain, which kept would fail the next request. The kept stream meanwhile serves on.
func TestForwardStreamedBodyNotKept(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	mustWhoami(t, b.url, "alice", "small", "small")
	big := strings.Repeat("b", 2*smallBody)
	mustWhoami(t, b.url, "alice", "big", big)
	if n := acceptedStreams(t, a); n != 2 {
		t.Fatalf("%v mesh streams, want 2 (the kept one, and the big body's own)", n)
	}
	if n := b.edge.mpool.size(a.meshAddr); n != 1 {
		t.Fatalf("%d streams kept, want 1: the big body's stream must not be", n)
	}
	mustWhoami(t, b.url, "alice", "small-again", "again")
	if n := acceptedStreams(t, a); n != 2 {
		t.Fatalf("%v mesh streams, want 2", n)
	}
	waitFor(t, "the big body's stream to end", func() bool {
		return counterValue(t, a.reg, "warren_mesh_open_streams", "in") == 1
	})
}

// Users' requests forwarded concurrently, among them clients that leave in the middle of a long answer and
// clients that give up before theirs, each get their own answer and headers, from a runner granted for
// them: no kept stream carries one exchange's bytes into another's. Streams are kept, not opened per
// request.
func TestForwardKeptStreamsIsolateRequests(t *testing.T) {
	rn := newMeshRunner(t)
	close(rn.release)
	a, b, _ := twoRegions(t, rn, live)
	mustWhoami(t, b.url, "alice", "warm-up", "b has read the region directory") // else the first ones race its first read
	const users, each = 6, 30
	errs := make(chan error, users*each)
	var wg sync.WaitGroup
	for u := range users {
		user := fmt.Sprint("user", u)
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			for i := range each {
				id, body := fmt.Sprintf("%s-%d", user, i), fmt.Sprintf("%s's body %d", user, i)
				switch i % 5 {
				case 3: // leaves after the first bytes of a long answer
					req, _ := http.NewRequest("POST", b.url+"/v1/sandbox/whoami?big", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+user)
					resp, err := client.Do(req)
					if err != nil {
						errs <- fmt.Errorf("%s: %v", id, err)
						continue
					}
					first := make([]byte, 100)
					_, err = io.ReadFull(resp.Body, first)
					resp.Body.Close()
					if want := user + " " + body; err != nil || !strings.HasPrefix(string(first), want) {
						errs <- fmt.Errorf("%s: long answer starts %q (%v), want %q", id, first, err, want)
					}
				case 4: // gives up once its request is sent
					ctx, cancel := context.WithCancel(context.Background())
					ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
					_, _, _, _, _ = whoami(ctx, client, "POST", b.url, "", user, id, body)
					cancel()
				default:
					code, who, echoed, got, err := whoami(context.Background(), client, "POST", b.url, "", user, id, body)
					if err != nil || code != http.StatusOK || who != user || echoed != id || got != user+" "+body {
						errs <- fmt.Errorf("%s: %d, who %q, request id %q, %q, %v", id, code, who, echoed, got, err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := acceptedStreams(t, a); n >= users*each/2 {
		t.Errorf("%v mesh streams for %d requests: not kept", n, users*each)
	}
	if n := b.edge.mpool.size(a.meshAddr); n > meshPoolIdle {
		t.Errorf("%d streams kept, more than %d", n, meshPoolIdle)
	}
}

// A kept stream the serving edge ended while it was idle (it does so only between exchanges, before
// reading anything of the next) fails the next request before any of it was acted on: it goes again on a
// new stream, POST as it is, and reaches the runner once.
func TestForwardKeptStreamEndedIdleSendsAgain(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	a.edge.meshIdle.Store(int64(20 * time.Millisecond))
	mustWhoami(t, b.url, "alice", "first", "one")
	waitFor(t, "a to end the idle stream", func() bool {
		return counterValue(t, a.reg, "warren_mesh_open_streams", "in") == 0
	})
	a.edge.meshIdle.Store(int64(meshServeIdleTimeout))
	if n := b.edge.mpool.size(a.meshAddr); n != 1 {
		t.Fatalf("%d streams kept, want the one a ended", n)
	}
	mustWhoami(t, b.url, "alice", "second", "two")
	if n := acceptedStreams(t, a); n != 2 {
		t.Fatalf("%v mesh streams, want 2 (the ended one, then a new one)", n)
	}
}

// A peer edge that restarts drops the streams kept to it: the next request goes on a new connection and
// stream. A POST in flight on a kept stream when the peer goes is answered unavailable and not sent again
// (the runner may have acted on it); an idempotent GET in flight is sent again, once (which the peer, still
// going down, may refuse: then it is answered unavailable too).
func TestForwardKeptStreamsPeerRestart(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	sends := func() float64 { // requests b sent to a, or tried to
		return metric(t, b.reg, "warren_edge_forwarded_total", "kind", "http", "region", "a", "outcome", "ok") +
			metric(t, b.reg, "warren_edge_forwarded_total", "kind", "http", "region", "a", "outcome", "mesh_failed")
	}
	mustWhoami(t, b.url, "alice", "first", "one")
	a.restart()
	waitFor(t, "b to learn that a's node is gone", func() bool { return liveKept(b.edge.mpool, a.meshAddr) == 0 })
	mustWhoami(t, b.url, "alice", "after-restart", "two")

	type result struct {
		code int
		body string
		err  error
	}
	held := func(method, body string) chan result {
		out := make(chan result, 1)
		go func() {
			code, _, _, got, err := whoami(testCtx(t), http.DefaultClient, method, b.url, "?hold", "alice", "held-"+method, body)
			out <- result{code, got, err}
		}()
		if got := <-rn.arrived; got != body {
			t.Fatalf("the runner got %q, want %q", got, body)
		}
		return out
	}

	before := sends()
	post := held("POST", "posted")
	a.restart()
	if r := <-post; r.err != nil || r.code != http.StatusServiceUnavailable {
		t.Fatalf("a POST in flight when the peer restarted: %d %q %v, want 503", r.code, r.body, r.err)
	}
	if n := sends() - before; n != 1 {
		t.Fatalf("a POST in flight when the peer restarted was sent %v times, want once", n)
	}

	waitFor(t, "b to learn that a's node is gone", func() bool { return liveKept(b.edge.mpool, a.meshAddr) == 0 })
	mustWhoami(t, b.url, "alice", "after-second-restart", "three") // a kept stream again
	before = sends()
	get := held("GET", "got")
	a.restart()
	select {
	case got := <-rn.arrived:
		if got != "got" {
			t.Fatalf("the GET in flight was sent again as %q", got)
		}
		close(rn.release)
		if r := <-get; r.err != nil || r.code != http.StatusOK || r.body != "alice got" {
			t.Fatalf("a GET in flight when the peer restarted: %d %q %v, want 200 after one retry", r.code, r.body, r.err)
		}
	case r := <-get: // the retry reached the peer going down
		if r.err != nil || r.code != http.StatusServiceUnavailable {
			t.Fatalf("a GET in flight when the peer restarted: %d %q %v, want 200 or 503", r.code, r.body, r.err)
		}
	}
	if n := sends() - before; n != 2 {
		t.Fatalf("a GET in flight when the peer restarted was sent %v times, want twice", n)
	}
}

// An exchange's stream goes back to the pool only when the answer was read to its end (and the request
// ended): one closed with part of its answer unread is reset, whatever closed it, so the rest of that
// answer can never be read as the next request's.
func TestExchangeKeptOnlyWhenComplete(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	send := func(query string) *exchange {
		t.Helper()
		b1, err := mesh.AppendHeader(nil, mesh.Header{Kind: mesh.KindHTTP, RequestID: "r", Issuer: "acme", User: "alice"})
		if err == nil {
			b1, err = appendGrant(b1, wire.Grant{Issuer: "acme", User: "alice", Window: string(billing.Day), AIMicros: -1, ComputeSeconds: -1})
		}
		if err == nil {
			b1, err = appendExchangeHead(b1, reqHead{Method: "POST", Path: "/v1/sandbox/whoami" + query, Header: http.Header{}, ContentLength: 4})
		}
		if err != nil {
			t.Fatal(err)
		}
		b1 = append(b1, "body"...)
		var early []byte
		early = binary.BigEndian.AppendUint32(early, uint32(len(b1)))
		early = binary.BigEndian.AppendUint32(append(early, b1...), 0)
		s, err := b.node.OpenWith(testCtx(t), "a", a.meshAddr, mesh.Header{Kind: mesh.KindRequests}, early)
		if err != nil {
			t.Fatal(err)
		}
		x := &exchange{s: s, pool: b.edge.mpool, addr: a.meshAddr, wended: true}
		var rh respHead
		if err := readExchangeHead(x, &rh); err != nil || rh.Status != http.StatusOK || rh.Header.Get("X-Who") != "alice" {
			t.Fatalf("answer head %+v, %v", rh, err)
		}
		return x
	}

	x := send("?big")
	if _, err := io.ReadFull(x, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if n := b.edge.mpool.size(a.meshAddr); n != 0 {
		t.Fatalf("a stream closed with its answer unread was kept (%d)", n)
	}
	if _, err := x.s.Read(make([]byte, 1)); !errors.Is(err, mesh.ErrStreamReset) && !strings.Contains(fmt.Sprint(err), "canceled") {
		t.Fatalf("the stream of an unfinished exchange reads %v, want it reset", err)
	}

	x = send("")
	if got, err := io.ReadAll(x); err != nil || string(got) != "alice body" {
		t.Fatalf("answer %q, %v", got, err)
	}
	x.Close()
	if n := b.edge.mpool.size(a.meshAddr); n != 1 {
		t.Fatalf("%d streams kept after a whole exchange, want 1", n)
	}
}

// readStream is a keptStream that only reads, from r.
type readStream struct {
	net.Conn
	r io.Reader
}

func (s readStream) Read(p []byte) (int, error)    { return s.r.Read(p) }
func (readStream) CloseWrite() error               { return nil }
func (readStream) Abort()                          {}
func (readStream) Connection() context.Context     { return context.Background() }
func (readStream) SetReadDeadline(time.Time) error { return nil }

// An exchange reads the peer's chunks exactly: the payloads up to the zero-length chunk, io.EOF there and
// only there; anything else (a chunk too long, a stream ending inside one or where one was due) is a
// typed error.
func FuzzExchangeChunks(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 1, 'a', 0, 0, 0, 2, 'b', 'c', 0, 0, 0, 0, 'x'})
	f.Add([]byte{0, 0, 0, 4, 'a'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		x := &exchange{s: readStream{r: bytes.NewReader(b)}}
		got, err := io.ReadAll(x)
		var want []byte
		ended := false
		for rest := b; len(rest) >= 4; {
			n := binary.BigEndian.Uint32(rest)
			rest = rest[4:]
			if n == 0 {
				ended = true
				break
			}
			if n > maxChunk || int(n) > len(rest) {
				break
			}
			want, rest = append(want, rest[:n]...), rest[n:]
		}
		switch {
		case ended && (err != nil || !bytes.Equal(got, want)):
			t.Fatalf("%x: read %q, %v; want %q", b, got, err, want)
		case !ended && err == nil:
			t.Fatalf("%x: read %q to its end without the end chunk", b, got)
		case !ended && !errors.Is(err, errBadFrame) && !errors.Is(err, errIdleClosed):
			t.Fatalf("%x: untyped error %v", b, err)
		}
		if n, err := x.Read(make([]byte, 8)); n != 0 || err == nil {
			t.Fatalf("%x: read %d bytes, %v after the exchange's end", b, n, err)
		}
	})
}

// An exchange's binary head is read exactly as written, and whatever else arrives is refused with a typed
// error, or accepted only as a head as checked as a JSON one.
func FuzzExchangeHead(f *testing.F) {
	req, _ := appendExchangeHead(nil, reqHead{Method: "POST", Path: "/v1/sandbox/exec?x=1", Header: http.Header{"Content-Type": {"a"}, "X-A": {"1", "2"}}, ContentLength: -1})
	f.Add(req)
	resp, _ := appendExchangeHead(nil, respHead{Status: 200, Header: http.Header{"X-A": {"b"}}})
	f.Add(resp)
	f.Add([]byte{0, 0, 0, 4, 0, 200, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h reqHead
		if err := readExchangeHead(bytes.NewReader(b), &h); err == nil {
			if !relayedPath(h.Path) && !previewPath(h.Path) || !validMethod(h.Method) || h.ContentLength < -1 || checkHeader(h.Header) != nil {
				t.Fatalf("accepted %+v", h)
			}
			again, err := appendExchangeHead(nil, h)
			var h2 reqHead
			if err != nil || readExchangeHead(bytes.NewReader(again), &h2) != nil || fmt.Sprint(h2) != fmt.Sprint(h) {
				t.Fatalf("%+v does not read back (%v): %+v", h, err, h2)
			}
		} else if !errors.Is(err, errBadFrame) {
			t.Fatalf("untyped error %v", err)
		}
		var rh respHead
		if err := readExchangeHead(bytes.NewReader(b), &rh); err == nil {
			if rh.Status < 101 || rh.Status > 599 || checkHeader(rh.Header) != nil {
				t.Fatalf("accepted %+v", rh)
			}
		} else if !errors.Is(err, errBadFrame) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

// closeCounter is a keptStream that counts its Closes.
type closeCounter struct {
	readStream
	closed *int
	conn   context.Context
}

func (c closeCounter) Close() error                   { *c.closed++; return nil }
func (c closeCounter) Connection() context.Context    { return c.conn }
func (closeCounter) SetDeadline(time.Time) error      { return nil }
func (closeCounter) SetWriteDeadline(time.Time) error { return nil }

// The pool keeps at most meshPoolIdle streams per peer edge, the most recent, and never answers one whose
// connection ended or that stayed idle meshPoolIdleTimeout; the streams of a peer edge no longer used are
// closed by a later put for another one.
func TestMeshPoolBounds(t *testing.T) {
	p := newMeshPool()
	closed := 0
	live, cancel := context.WithCancel(context.Background())
	mk := func() closeCounter { return closeCounter{closed: &closed, conn: live} }
	for range meshPoolIdle + 3 {
		p.put("x", mk())
	}
	if n := p.size("x"); n != meshPoolIdle || closed != 3 {
		t.Fatalf("%d kept, %d closed; want %d and 3", n, closed, meshPoolIdle)
	}
	p.mu.Lock()
	p.idle["x"][meshPoolIdle-1].since = time.Now().Add(-meshPoolIdleTimeout) // the most recent: expired
	p.mu.Unlock()
	if s := p.get("x"); s == nil || closed != 4 {
		t.Fatalf("get answered %v with %d closed; want the next stream, the expired one closed", s, closed)
	}
	p.mu.Lock()
	p.swept = time.Time{}
	for i := range p.idle["x"] {
		p.idle["x"][i].since = time.Now().Add(-meshPoolIdleTimeout)
	}
	p.mu.Unlock()
	p.put("y", mk())
	if n := p.size("x"); n != 0 || closed != 4+meshPoolIdle-2 {
		t.Fatalf("x: %d kept, %d closed after a sweep", n, closed)
	}
	cancel() // y's connection ends
	if s := p.get("y"); s != nil {
		t.Fatal("a stream whose connection ended was answered")
	}
}
