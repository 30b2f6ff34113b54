package mesh

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// echo is a Handler that writes back everything it reads, then closes.
func echo(_ context.Context, _ string, s *Stream) { io.Copy(s, s) }

// roundTrip writes msg on s, closes its send side and answers all s reads back.
func roundTrip(t testing.TB, s *Stream, msg []byte) []byte {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Write(msg)
		if err == nil {
			err = s.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	return got
}

// Two nodes exchange data both ways on one stream, the header arrives as sent, each side knows the other's
// region, and the metrics count the stream and its bytes on both sides.
func TestExchange(t *testing.T) {
	type seen struct {
		from string
		h    Header
		req  string
	}
	got := make(chan seen, 1)
	_, eu, us := pair(t, func(ctx context.Context, from string, s *Stream) {
		req, err := io.ReadAll(s)
		if err != nil {
			t.Errorf("handler read: %v", err)
			return
		}
		got <- seen{from, s.Header(), string(req)}
		fmt.Fprintf(s, "hello %s, this is %s", s.Peer(), regionEU)
	})

	h := Header{Kind: KindHTTP, RequestID: "req-1", Issuer: "acme", User: "user-7", Epoch: 3}
	s, err := us.Open(testCtx(t), regionEU, eu.addr, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Peer() != regionEU {
		t.Fatalf("peer %q", s.Peer())
	}
	resp := roundTrip(t, s, []byte("ping from us"))
	if string(resp) != "hello us, this is eu" {
		t.Fatalf("response %q", resp)
	}
	if g := <-got; g.from != regionUS || g.h != h || g.req != "ping from us" {
		t.Fatalf("handler saw %+v", g)
	}
	s.Close()

	for _, c := range []struct {
		n      *testNode
		name   string
		labels []string
		want   float64
	}{
		{us, "warren_mesh_streams_opened_total", []string{"peer", regionEU, "outcome", "ok"}, 1},
		{eu, "warren_mesh_streams_accepted_total", []string{"peer", regionUS, "outcome", "ok"}, 1},
		{us, "warren_mesh_stream_bytes_total", []string{"peer", regionEU, "direction", "sent"}, float64(len("ping from us"))},
		{us, "warren_mesh_stream_bytes_total", []string{"peer", regionEU, "direction", "received"}, float64(len(resp))},
		{eu, "warren_mesh_stream_bytes_total", []string{"peer", regionUS, "direction", "received"}, float64(len("ping from us"))},
		{us, "warren_mesh_open_streams", []string{"peer", regionEU, "direction", "out"}, 0},
		{us, "warren_mesh_connections", []string{"peer", regionEU, "direction", "out"}, 1},
		{eu, "warren_mesh_connections", []string{"peer", regionUS, "direction", "in"}, 1},
		{us, "warren_mesh_failures_total", nil, 0},
		{eu, "warren_mesh_failures_total", nil, 0},
	} {
		if v := c.n.metric(t, c.name, c.labels...); v != c.want {
			t.Errorf("%s %v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if us.metric(t, "warren_mesh_rtt_seconds", "peer", regionEU) <= 0 {
		t.Error("no RTT for eu")
	}
}

// 100 streams at once over one connection, each echoing its own 64 KiB intact.
func TestConcurrentStreams(t *testing.T) {
	_, eu, us := pair(t, echo)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			msg := make([]byte, 64<<10)
			rand.Read(msg)
			s, err := us.Open(ctx, regionEU, eu.addr, Header{Kind: KindWebSocket, RequestID: fmt.Sprint(i)})
			if err != nil {
				t.Errorf("open %d: %v", i, err)
				return
			}
			defer s.Close()
			if got := roundTrip(t, s, msg); !bytes.Equal(got, msg) {
				t.Errorf("stream %d: echo differs (%d bytes)", i, len(got))
			}
		})
	}
	wg.Wait()
	if v := us.metric(t, "warren_mesh_streams_opened_total", "peer", regionEU, "outcome", "ok"); v != 100 {
		t.Errorf("opened %v streams", v)
	}
	if v := us.metric(t, "warren_mesh_connections", "peer", regionEU); v != 1 {
		t.Errorf("%v connections to eu, want the one shared", v)
	}
	if v := eu.metric(t, "warren_mesh_connections", "peer", regionUS); v != 1 {
		t.Errorf("eu accepted %v connections, want one", v)
	}
}

// A peer whose certificate comes from a CA the node does not trust is refused, each side with a typed error
// and counted: the listener refuses a dialer (untrusted), and a dialer refuses a listener.
func TestRefusesOtherCA(t *testing.T) {
	ca := testCA(t)
	eu := newNode(t, ca, regionEU, echo)
	eu.listen(t, "")
	intruder := newNode(t, ca, regionUS, nil, func(c *Config) { c.Certificate = otherCert(t, regionUS) })

	_, err := intruder.Open(testCtx(t), regionEU, eu.addr, Header{Kind: KindHTTP})
	if !errors.Is(err, ErrHandshakeRefused) {
		t.Fatalf("intruder's Open: %v, want ErrHandshakeRefused", err)
	}
	if v := eu.metric(t, "warren_mesh_failures_total", "peer", "unknown", "reason", ReasonUntrusted); v != 1 {
		t.Errorf("eu counted %v untrusted peers", v)
	}
	if v := intruder.metric(t, "warren_mesh_failures_total", "peer", regionEU, "reason", ReasonHandshakeRefused); v != 1 {
		t.Errorf("the intruder counted %v refused handshakes", v)
	}
	// A dialer without a certificate is refused the same way.
	anonymous := newNode(t, ca, regionUS, nil, func(c *Config) {
		c.Certificate = func() (*tls.Certificate, error) { return &tls.Certificate{}, nil }
	})
	if _, err := anonymous.Open(testCtx(t), regionEU, eu.addr, Header{Kind: KindHTTP}); !errors.Is(err, ErrHandshakeRefused) {
		t.Fatalf("Open without a certificate: %v, want ErrHandshakeRefused", err)
	}
	if v := eu.metric(t, "warren_mesh_failures_total", "peer", "unknown", "reason", ReasonUntrusted); v != 2 {
		t.Errorf("eu counted %v untrusted peers, want 2", v)
	}
	if v := eu.metric(t, "warren_mesh_connections"); v != 0 {
		t.Errorf("eu holds %v connections", v)
	}

	// The other way: a listener with a foreign certificate.
	fake := newNode(t, ca, regionAP, echo, func(c *Config) { c.Certificate = otherCert(t, regionAP) })
	fake.listen(t, "")
	us := newNode(t, ca, regionUS, nil)
	_, err = us.Open(testCtx(t), regionAP, fake.addr, Header{Kind: KindHTTP})
	if !errors.Is(err, ErrUntrusted) {
		t.Fatalf("Open to a foreign listener: %v, want ErrUntrusted", err)
	}
	if v := us.metric(t, "warren_mesh_failures_total", "peer", regionAP, "reason", ReasonUntrusted); v != 1 {
		t.Errorf("us counted %v untrusted peers", v)
	}
	if v := us.metric(t, "warren_mesh_streams_opened_total", "peer", regionAP, "outcome", ReasonUntrusted); v != 1 {
		t.Errorf("us counted %v refused opens", v)
	}
}

// A peer with a good chain whose certificate names a region outside the known set is refused.
func TestRefusesUnknownRegion(t *testing.T) {
	ca := testCA(t)
	eu := newNode(t, ca, regionEU, echo)
	eu.listen(t, "")
	stranger := newNode(t, ca, "mars", nil, func(c *Config) { c.KnownRegions = func(string) bool { return true } })

	_, err := stranger.Open(testCtx(t), regionEU, eu.addr, Header{Kind: KindHTTP})
	if !errors.Is(err, ErrHandshakeRefused) {
		t.Fatalf("stranger's Open: %v, want ErrHandshakeRefused", err)
	}
	if v := eu.metric(t, "warren_mesh_failures_total", "peer", "unknown", "reason", ReasonUnknownRegion); v != 1 {
		t.Errorf("eu counted %v unknown regions", v)
	}
	if v := eu.metric(t, "warren_mesh_failures_total", "peer", "mars"); v != 0 {
		t.Error("a refused peer's region became a label")
	}

	// Nor does a node open streams to a region it does not know.
	us := newNode(t, ca, regionUS, nil)
	if _, err := us.Open(testCtx(t), "mars", eu.addr, Header{Kind: KindHTTP}); !errors.Is(err, ErrUnknownRegion) {
		t.Fatalf("Open to mars: %v, want ErrUnknownRegion", err)
	}
}

// A dialer that reaches a node whose certificate names another region than the one it dialed refuses it.
func TestRefusesRegionMismatch(t *testing.T) {
	_, eu, us := pair(t, echo)

	_, err := us.Open(testCtx(t), regionAP, eu.addr, Header{Kind: KindHTTP})
	if !errors.Is(err, ErrRegionMismatch) {
		t.Fatalf("Open to ap at eu's address: %v, want ErrRegionMismatch", err)
	}
	if v := us.metric(t, "warren_mesh_failures_total", "peer", regionAP, "reason", ReasonRegionMismatch); v != 1 {
		t.Errorf("us counted %v mismatches", v)
	}
	us.open(t, eu, KindHTTP) // the right region at the same address still works
}

// A stream whose header is malformed, of another version or of an unknown kind is refused by the acceptor
// with its reason, and counted; the connection stays up for good streams.
func TestRefusesBadHeader(t *testing.T) {
	_, eu, us := pair(t, echo)
	ctx := testCtx(t)
	s := us.open(t, eu, KindHTTP)
	good, _ := AppendHeader(nil, Header{Kind: KindHTTP})
	for _, c := range []struct {
		b    []byte
		want error
	}{
		{append([]byte{9}, good[1:]...), ErrVersion},
		{append([]byte{1, 200}, good[2:]...), ErrKind},
		{[]byte{1, 1, 1, '\n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrHeader},
	} {
		_, err := us.openOn(ctx, s.conn, regionEU, c.b, Header{})
		if !errors.Is(err, ErrStreamRefused) || !errors.Is(err, c.want) {
			t.Errorf("raw header %x: %v, want ErrStreamRefused and %v", c.b, err, c.want)
		}
	}
	if v := eu.metric(t, "warren_mesh_streams_accepted_total", "peer", regionUS, "outcome", ReasonBadHeader); v != 3 {
		t.Errorf("eu counted %v bad headers", v)
	}
	if v := us.metric(t, "warren_mesh_failures_total", "peer", regionEU, "reason", ReasonStreamRefused); v != 3 {
		t.Errorf("us counted %v refused streams", v)
	}
	us.open(t, eu, KindHTTP) // after the refusals
	if v := us.metric(t, "warren_mesh_connections", "peer", regionEU); v != 1 {
		t.Errorf("%v connections, want the one", v)
	}
}

// A handler that stops reading makes the writer block once the stream window is full: what the writer got
// rid of never exceeds the window the reader grants, so nothing buffers without bound. When the handler reads
// again, everything arrives.
func TestBackpressure(t *testing.T) {
	const window = 64 << 10
	resume := make(chan struct{})
	received := make(chan int64, 1)
	_, eu, us := pair(t, func(ctx context.Context, _ string, s *Stream) {
		var first [1024]byte
		io.ReadFull(s, first[:])
		<-resume // stop reading
		n, _ := io.Copy(io.Discard, s)
		received <- n + int64(len(first))
	}, func(c *Config) { c.StreamWindow = window })
	s := us.open(t, eu, KindWebSocket)

	// One Write of 32 windows: it cannot complete while the reader is stopped. The deadline only turns a
	// blocked Write into a result; the assertion is on bytes, whatever the machine's speed.
	big := make([]byte, 32*window)
	s.SetWriteDeadline(time.Now().Add(time.Second))
	n, err := s.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write to a stopped reader: %d bytes, %v; want a blocked write", n, err)
	}
	if n > window {
		t.Fatalf("%d bytes left the writer, more than the %d-byte window", n, window)
	}
	t.Logf("%d bytes in flight with a %d-byte window", n, window)

	close(resume)
	s.SetWriteDeadline(time.Time{})
	m, err := s.Write(big[n:])
	if err != nil {
		t.Fatal(err)
	}
	s.CloseWrite()
	if got := <-received; got != int64(n+m) || got != int64(len(big)) {
		t.Fatalf("the reader got %d bytes, %d were written", got, n+m)
	}
}

// Restarting the listening node on the same address: the next Open dials a new connection and succeeds.
func TestReconnect(t *testing.T) {
	ca := testCA(t)
	eu := newNode(t, ca, regionEU, echo)
	addr := eu.listen(t, "")
	us := newNode(t, ca, regionUS, nil)
	ctx := testCtx(t)

	s1, err := us.Open(ctx, regionEU, addr, Header{Kind: KindHTTP})
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, s1, []byte("one")); string(got) != "one" {
		t.Fatalf("echo %q", got)
	}
	s1.Close()
	if err := eu.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select { // the close reaches us
	case <-s1.conn.Context().Done():
	case <-ctx.Done():
		t.Fatal("the connection outlived its peer's close")
	}

	reopen(t, ca, us, addr, s1.conn)
}

// reopen starts a new eu node on addr and checks that us opens a stream to it over a new connection, not
// old, and that the stream works.
func reopen(t *testing.T, ca *CA, us *testNode, addr string, old *quic.Conn, edit ...func(*Config)) {
	t.Helper()
	eu := newNode(t, ca, regionEU, echo, edit...)
	eu.listen(t, addr)
	s, err := us.Open(testCtx(t), regionEU, addr, Header{Kind: KindHTTP})
	if err != nil {
		t.Fatalf("Open after the restart: %v", err)
	}
	defer s.Close()
	if s.conn == old {
		t.Fatal("the dead connection was reused")
	}
	if got := roundTrip(t, s, []byte("again")); string(got) != "again" {
		t.Fatalf("echo %q", got)
	}
}

// A peer that vanished without closing (its process died), replaced by a new process on the same address:
// with a stateless reset key the new process tells the dialer at once that the old connection is gone, and
// Open redials transparently even though the dialer still thought its connection alive.
func TestReconnectAfterCrash(t *testing.T) {
	ca := testCA(t)
	var key quic.StatelessResetKey
	rand.Read(key[:])
	withKey := func(c *Config) { c.StatelessResetKey = &key }
	ctx := testCtx(t)

	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	eu := newNode(t, ca, regionEU, echo, withKey)
	served := make(chan error, 1)
	go func() { served <- eu.Serve(ctx, pc) }()
	us := newNode(t, ca, regionUS, nil, withKey)
	s1, err := us.Open(ctx, regionEU, addr, Header{Kind: KindHTTP})
	if err != nil {
		t.Fatal(err)
	}
	s1.Close()

	// The crash: the socket goes away without a word to the peer.
	eu.mu.Lock()
	for tr := range eu.transports {
		tr.Close() // destroys the connections silently
	}
	eu.mu.Unlock()
	if err := <-served; err != nil { // Serve returns once its socket is closed
		t.Fatal(err)
	}
	if s1.conn.Context().Err() != nil {
		t.Fatal("the dialer learnt of the crash: the test proves nothing")
	}

	reopen(t, ca, us, addr, s1.conn, withKey)
}

// With keepalive, a connection idle for longer than the idle timeout stays up; without, it is closed.
func TestKeepAlive(t *testing.T) {
	const idle = 400 * time.Millisecond
	for _, c := range []struct {
		name      string
		keepAlive time.Duration
		survives  bool
	}{{"on", 100 * time.Millisecond, true}, {"off", -1, false}} {
		t.Run(c.name, func(t *testing.T) {
			_, eu, us := pair(t, echo, func(cfg *Config) { cfg.IdleTimeout, cfg.KeepAlive = idle, c.keepAlive })
			ctx := testCtx(t)
			s := us.open(t, eu, KindWebSocket)
			conn := s.conn
			if !c.survives {
				select { // the test's deadline turns a connection that never times out into a failure
				case <-conn.Context().Done():
					if !errors.As(context.Cause(conn.Context()), new(*quic.IdleTimeoutError)) {
						t.Fatalf("closed by %v, not the idle timeout", context.Cause(conn.Context()))
					}
				case <-ctx.Done():
					t.Fatal("an idle connection without keepalive outlived the deadline")
				}
				return
			}
			time.Sleep(4 * idle)
			if conn.Context().Err() != nil {
				t.Fatalf("the connection died although kept alive: %v", context.Cause(conn.Context()))
			}
			if _, err := s.Write([]byte("still here")); err != nil {
				t.Fatal(err)
			}
			var buf [10]byte
			if _, err := io.ReadFull(s, buf[:]); err != nil || string(buf[:]) != "still here" {
				t.Fatalf("echo after idling: %q, %v", buf, err)
			}
		})
	}
}

// Open gives up when its context ends: while dialing a peer that never answers, and while waiting for a
// stream slot at a peer that allows no more.
func TestOpenHonoursContext(t *testing.T) {
	ca := testCA(t)
	us := newNode(t, ca, regionUS, nil)

	// A UDP socket that reads nothing: the handshake never completes.
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := us.Open(ctx, regionEU, silent.LocalAddr().String(), Header{Kind: KindHTTP}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open to a silent peer: %v, want context.Canceled", err)
	}

	// A peer that allows one stream at a time, which is taken.
	hold := make(chan struct{})
	defer close(hold)
	eu := newNode(t, ca, regionEU, func(ctx context.Context, _ string, s *Stream) {
		select {
		case <-hold:
		case <-ctx.Done():
		}
	}, func(c *Config) { c.MaxStreamsPerPeer = 1 })
	eu.listen(t, "")
	s, err := us.Open(testCtx(t), regionEU, eu.addr, Header{Kind: KindHTTP})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel = context.WithCancel(testCtx(t))
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := us.Open(ctx, regionEU, eu.addr, Header{Kind: KindHTTP}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open beyond the peer's stream limit: %v, want context.Canceled", err)
	}
	if v := us.metric(t, "warren_mesh_streams_opened_total", "outcome", "canceled"); v != 2 {
		t.Errorf("%v cancelled opens counted", v)
	}
}

// A closed node refuses Opens, and Close waits for handlers.
func TestClose(t *testing.T) {
	var running atomic.Int32
	_, eu, us := pair(t, func(ctx context.Context, _ string, s *Stream) {
		running.Add(1)
		defer running.Add(-1)
		<-ctx.Done()
	})
	us.open(t, eu, KindHTTP)
	if err := eu.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if running.Load() != 0 {
		t.Fatal("Close returned with a handler running")
	}
	if _, err := eu.Open(testCtx(t), regionUS, "127.0.0.1:1", Header{Kind: KindHTTP}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Open on a closed node: %v", err)
	}
}

// A stream the peer aborts fails with ErrStreamReset on this side and is counted; a peer that never answers
// the handshake is ErrDial once HandshakeTimeout has passed, counted as dial_failed.
func TestResetAndDialFailure(t *testing.T) {
	_, eu, us := pair(t, func(ctx context.Context, _ string, s *Stream) { s.Abort() },
		func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	s := us.open(t, eu, KindWebSocket)
	if _, err := io.ReadAll(s); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("read of an aborted stream: %v, want ErrStreamReset", err)
	}
	if v := us.metric(t, "warren_mesh_failures_total", "peer", regionEU, "reason", ReasonStreamReset); v != 1 {
		t.Errorf("%v resets counted", v)
	}

	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if _, err := us.Open(testCtx(t), regionAP, silent.LocalAddr().String(), Header{Kind: KindHTTP}); !errors.Is(err, ErrDial) {
		t.Fatalf("Open to a silent peer: %v, want ErrDial", err)
	}
	if v := us.metric(t, "warren_mesh_failures_total", "peer", regionAP, "reason", ReasonDialFailed); v != 1 {
		t.Errorf("%v dial failures counted", v)
	}
	if v := us.metric(t, "warren_mesh_streams_opened_total", "peer", regionAP, "outcome", ReasonDialFailed); v != 1 {
		t.Errorf("%v failed opens counted", v)
	}
}
