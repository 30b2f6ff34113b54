package devstack_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// wtClient is a client of st for user that opens sessions over transport t.
func wtClient(t *testing.T, st interface{ URL() string }, tok string, tr warren.Transport, dial time.Duration) *warren.Client {
	t.Helper()
	c, err := warren.New(st.URL(), tok, warren.WithTransport(tr, dial))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// shape is a turn's events as their types (stream_event by its event type), seqs left out: what the two
// transports must agree on.
func shape(evs []warren.Event) []string {
	var out []string
	for _, ev := range evs {
		k := ev.Type
		if se, ok := ev.StreamEvent(); ok {
			k += "/" + se.Event.Type
		}
		if info, ok := ev.SessionInfo(); ok {
			k += "/" + string(info.State)
		}
		out = append(out, k)
	}
	return out
}

// TestWebTransportTurnMatchesWebSocket: the real Claude Code CLI against the scripted model, one turn over
// WebTransport and the same turn over WebSocket (two users, same scenario): both stream the same events in
// the same order, partial messages included, to the same result text; the WebTransport session is
// counted under transport="webtransport".
func TestWebTransportTurnMatchesWebSocket(t *testing.T) {
	st := agentStack(t, agentOpts{})
	if st.WebTransportURL() == "" {
		t.Fatal("the dev stack serves no WebTransport")
	}
	ctx := agentCtx(t)
	run := func(user string, tr warren.Transport) ([]warren.Event, *warren.ResultEvent) {
		c := wtClient(t, st, mint(t, st, user, withBudget(5_000_000)), tr, 0)
		s, err := c.Dial(ctx, &warren.SessionOptions{IncludePartialMessages: true})
		if err != nil {
			t.Fatalf("%s: dial: %v", tr, err)
		}
		defer s.Close()
		if s.Transport() != tr {
			t.Fatalf("session over %s, want %s", s.Transport(), tr)
		}
		for ev, err := range s.Events() { // the handshake
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ev.Ready(); ok {
				break
			}
		}
		evs, res := turn(t, ctx, s, "create hello.txt containing hi")
		if _, err := s.Ping(ctx); err != nil {
			t.Fatalf("%s: ping: %v", tr, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("%s: close: %v", tr, err)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("%s: a normal close ended with %v", tr, err)
		}
		return evs, res
	}
	wtEvs, wtRes := run("wendy", warren.TransportWebTransport)
	wsEvs, wsRes := run("walter", warren.TransportWebSocket)
	if wtRes.IsError || wtRes.Result != wsRes.Result || wtRes.Result == "" {
		t.Fatalf("results differ: wt %+v\nws %+v", wtRes, wsRes)
	}
	// The same events, first and last alike. The order in between is the CLI's, not the transport's: it
	// writes a tool's result (user) before or after the message's stream end events from run to run.
	a, b := shape(wtEvs), shape(wsEvs)
	sa, sb := slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	if !slices.Equal(sa, sb) || a[0] != b[0] || a[len(a)-1] != b[len(b)-1] {
		t.Fatalf("the turns' events differ:\nwt %v\nws %v", a, b)
	}
	if !slices.ContainsFunc(wtEvs, func(ev warren.Event) bool { _, ok := ev.StreamEvent(); return ok }) {
		t.Fatal("no stream_event over WebTransport")
	}
	if b, err := warren.New(st.URL(), mint(t, st, "wendy")); err != nil {
		t.Fatal(err)
	} else if data, err := b.Sandbox().ReadFile(ctx, "hello.txt"); err != nil || string(data) != "hi" {
		t.Fatalf("hello.txt = %q, %v", data, err)
	}
	metrics := scrape(t, st.URL()+"/metrics")
	for _, want := range []string{`warren_edge_connections_total{transport="webtransport"} 1`, `warren_edge_connections_total{transport="websocket"} 1`} {
		if !containsLine(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestWebTransportResumeWithLastSeq: a session opened over WebTransport is resumed over WebTransport on a
// new connection with the lastSeq of the first: the turn that ran meanwhile is replayed after it, nothing
// before it.
func TestWebTransportResumeWithLastSeq(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := wtClient(t, st, mint(t, st, "rita", withBudget(5_000_000)), warren.TransportWebTransport, 0)
	s, err := c.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.Ready(); ok {
			break
		}
	}
	last := s.LastSeq()
	_, res := turn(t, ctx, s, "create a.txt containing one")
	id := s.ID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := c.Resume(ctx, id, last)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Transport() != warren.TransportWebTransport || r.ID() != id {
		t.Fatalf("resumed %s over %s", r.ID(), r.Transport())
	}
	var replayed *warren.ResultEvent
	for ev, err := range r.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq > 0 && ev.Seq <= last {
			t.Fatalf("seq %d replayed, at or before lastSeq %d", ev.Seq, last)
		}
		if rr, ok := ev.Result(); ok {
			replayed = rr
			break
		}
	}
	if replayed == nil || replayed.Result != res.Result {
		t.Fatalf("replayed result %+v, want %+v", replayed, res)
	}
}

// TestWebTransportAuthRefused: a bad token over WebTransport is refused as over WebSocket: the SDK gets
// unauthenticated, and a raw WebTransport client reads the error message on its stream, then sees the
// session closed with error code 4401 (the WebSocket close code) and the JSON reason.
func TestWebTransportAuthRefused(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	c := wtClient(t, st, "not.a.jwt", warren.TransportWebTransport, 0)
	if _, err := c.Dial(ctx, nil); !warren.IsCode(err, warren.CodeUnauthenticated) {
		t.Fatalf("sdk over webtransport, bad token: %v", err)
	}

	rs, err := wtClient(t, st, "", warren.TransportWebSocket, 0).Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hashes := rs.Regions[0].CertificateHashes
	if len(hashes) != 1 || hashes[0].Algorithm != "sha-256" || rs.Regions[0].WebTransport != st.WebTransportURL() {
		t.Fatalf("regions: %+v", rs)
	}
	d := &webtransport.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if base64.StdEncoding.EncodeToString(sum[:]) != hashes[0].Value {
				return errors.New("certificate is not the published one")
			}
			return nil
		}},
		QUICConfig: &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true},
	}
	_, sess, err := d.Dial(ctx, st.WebTransportURL()+"?token=not.a.jwt", http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	str, err := sess.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A stream reaches the edge with its first bytes: init, as a client always sends first.
	if _, err := str.Write(wire.AppendStreamFrame(nil, []byte(`{"type":"init","payload":{}}`))); err != nil {
		t.Fatal(err)
	}
	msg, err := wire.ReadStreamFrame(str, wire.MaxFrame)
	if err != nil {
		t.Fatalf("read the error message: %v", err)
	}
	var m struct {
		Type    string     `json:"type"`
		Payload wire.Error `json:"payload"`
	}
	if err := json.Unmarshal(msg, &m); err != nil || m.Type != wire.TypeError || m.Payload.Code != wire.Unauthenticated {
		t.Fatalf("first message %s: %v", msg, err)
	}
	if _, err := wire.ReadStreamFrame(str, wire.MaxFrame); !errors.Is(err, io.EOF) {
		t.Fatalf("after the error message: %v, want the end of the stream", err)
	}
	_ = str.Close() // our side ends too: the edge closes the session now
	<-sess.Context().Done()
	_, err = sess.OpenStream()
	var se *webtransport.SessionError
	if !errors.As(err, &se) || se.ErrorCode != 4401 || wire.CodeForCloseCode(int(se.ErrorCode)) != wire.Unauthenticated {
		t.Fatalf("session closed with %v, want error code 4401", err)
	}
}

// TestAutoFallsBackToWebSocketWhenUDPIsBlocked: the edge lists its WebTransport URL but nothing answers on
// its UDP port (a socket that drops every datagram, as a firewall does); a client in auto mode gives up on
// WebTransport at its dial timeout and opens the session over WebSocket.
func TestAutoFallsBackToWebSocketWhenUDPIsBlocked(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	if err := st.StopWebTransport(); err != nil {
		t.Fatal(err)
	}
	// Hold the port: datagrams arrive and are never read.
	blackhole, err := net.ListenPacket("udp", st.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer blackhole.Close()
	c := wtClient(t, st, mint(t, st, "bob"), warren.TransportAuto, 300*time.Millisecond)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := c.Dial(dctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Transport() != warren.TransportWebSocket {
		t.Fatalf("session over %s, want the WebSocket fallback", s.Transport())
	}
	if _, err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// WebTransport only: the same blocked port is an error, not a hang.
	if _, err := wtClient(t, st, mint(t, st, "bob"), warren.TransportWebTransport, 300*time.Millisecond).Dial(dctx, nil); err == nil {
		t.Fatal("a WebTransport-only dial to a blocked port succeeded")
	}
}

// scrape reads the Prometheus text at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func containsLine(text, line string) bool {
	return slices.Contains(strings.Split(text, "\n"), line)
}

// TestChatCLIOverWebTransport: warren chat opens its session over WebTransport by default (auto) when the
// edge offers it, and over WebSocket with -transport websocket; both complete the turn.
func TestChatCLIOverWebTransport(t *testing.T) {
	st := agentStack(t, agentOpts{})
	env := append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+mint(t, st, "chad", withBudget(5_000_000)))
	for _, tc := range []struct{ flag, want string }{{"auto", "over webtransport"}, {"websocket", "over websocket"}} {
		cmd := exec.Command(binary, "chat", "-transport", tc.flag, "-p", "create hello.txt containing hi")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("warren chat -transport %s: %v\n%s", tc.flag, err, out)
		}
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "cost:") {
			t.Fatalf("warren chat -transport %s: output lacks %q or the cost:\n%s", tc.flag, tc.want, out)
		}
	}
}
