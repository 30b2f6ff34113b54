package edge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
)

// Upgraded requests (a terminal's WebSocket, GET /v1/sandbox/terminals/{id}/attach) through the edge.
// Toward the user's runner in this region, httputil.ReverseProxy relays the upgrade itself (proxyToRunner).
// Across regions, the forwarded request's stream carries the request head, then the response head (101),
// then the upgraded connection's bytes both ways: the forwarding side keeps its half of the stream open
// after the head and hands ReverseProxy a read-write body (upgradedBody); the owning side relays the
// stream to the runner's upgraded connection (relayUpgrade).

// isUpgrade tells whether h asks for a protocol upgrade (Connection: upgrade with an Upgrade header).
func isUpgrade(h http.Header) bool {
	if h.Get("Upgrade") == "" {
		return false
	}
	for _, v := range h.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return true
			}
		}
	}
	return false
}

// upgradedBody is the body of a forwarded 101 answer: the stream, written as well as read.
type upgradedBody struct {
	*streamBody
}

func (b upgradedBody) Write(p []byte) (int, error) { return b.s.Write(p) }

// runnerHeaders sets what a request relayed to a's runner carries: the runner's key instead of the user's
// token, the request id, a's grant, no cookies.
func runnerHeaders(h http.Header, a *admitted, requestID, path string) {
	h.Set("Authorization", "Bearer "+a.entry.Key)
	h.Set(httpx.HeaderRequestID, requestID)
	h.Del("Cookie")
	if strings.HasPrefix(path, "/v1/preview/") {
		// A preview's request runs under the grant made when the preview was; it must not take the place of
		// the one the user's newest request brought (edge/preview.go).
		h.Del(wire.HeaderGrant)
		return
	}
	h.Set(wire.HeaderGrant, a.grant(a.budget).Encode())
}

// relayUpgrade serves a forwarded upgrade request (head read from s): it sends it to a's runner, writes the
// answer's head on s, and for a 101 relays bytes both ways until either side ends.
func (e *Edge) relayUpgrade(ctx context.Context, s meshStream, w *streamResponse, head reqHead, a *admitted) {
	req, err := http.NewRequestWithContext(ctx, head.Method, "http://"+a.entry.Addr+head.Path, nil)
	if err != nil {
		w.failed = true
		return
	}
	req.Header = head.Header.Clone()
	req.Host = a.entry.Addr
	runnerHeaders(req.Header, a, head.Header.Get("X-Request-Id"), head.Path)
	resp, err := e.runners.Transport.RoundTrip(req)
	if err != nil {
		a.log.Warn("runner unreachable for an upgrade", "addr", a.entry.Addr, "err", err)
		wire.WriteHTTPError(w, a.log, wire.Wrap(wire.Unavailable, err, "your sandbox was restarting; retry the request"))
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.header[k] = v
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	// The 101 head goes out as is (streamResponse forwards only final answers).
	frame, err := appendHead(nil, respHead{Status: resp.StatusCode, Header: w.header.Clone()})
	if err == nil {
		_, err = s.Write(frame)
	}
	w.written = true
	if err != nil {
		w.failed = true
		return
	}
	var once sync.Once
	end := func() { once.Do(func() { _ = rwc.Close(); s.Abort() }) }
	stop := context.AfterFunc(ctx, end)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(rwc, s)
		end()
	}()
	_, err = io.Copy(s, rwc)
	if err != nil && !errors.Is(err, io.EOF) {
		a.log.Debug("upgraded connection ended", "err", err)
	}
	end()
	<-done
	w.failed = true // the stream was aborted: nothing more to close
}
