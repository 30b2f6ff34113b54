package mesh

import (
	"context"
	"io"
	"testing"
)

// OpenWith's early bytes reach the handler first, right after the header, followed by what the opener
// writes next; they count as sent bytes.
func TestOpenWithEarlyData(t *testing.T) {
	got := make(chan string, 1)
	_, eu, us := pair(t, func(ctx context.Context, from string, s *Stream) {
		b, err := io.ReadAll(s)
		if err != nil {
			t.Errorf("handler read: %v", err)
		}
		got <- string(b)
		_, _ = s.Write([]byte("ok"))
	})
	s, err := us.OpenWith(testCtx(t), regionEU, eu.addr, Header{Kind: KindHTTP, Issuer: "acme", User: "u"}, []byte("early bytes, "))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if resp := roundTrip(t, s, []byte("then the rest")); string(resp) != "ok" {
		t.Fatalf("response %q", resp)
	}
	if g := <-got; g != "early bytes, then the rest" {
		t.Fatalf("handler read %q", g)
	}
	if v := us.metric(t, "warren_mesh_stream_bytes_total", "peer", regionEU, "direction", "sent"); v != float64(len("early bytes, then the rest")) {
		t.Fatalf("sent bytes %v", v)
	}
}
