package tasks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/internal/backoff"
	"github.com/warren-mesh/warren/internal/netdeny"
	"github.com/warren-mesh/warren/internal/wire"
)

// Webhook headers (docs/PROTOCOL.md#tasks): the signature is "v1=" and the hex HMAC-SHA256, keyed with the
// issuer's webhook secret (WebhookSecret), of the timestamp header's value, a ".", and the body.
const (
	HeaderWebhookID        = wire.HeaderWebhookID
	HeaderWebhookTimestamp = wire.HeaderWebhookTimestamp
	HeaderWebhookSignature = wire.HeaderWebhookSignature
)

// MaxWebhookURL bounds a webhook URL's length.
const MaxWebhookURL = 2048

// WebhookSecret is the secret an issuer verifies its task webhooks with: derived from the operator's
// configured secret (-webhook-secret-file) and the issuer id, so each issuer can verify its own webhooks
// and forge no other issuer's. It is hex: HMAC-SHA256(master, "warren-webhook:" + issuer).
func WebhookSecret(master []byte, issuer string) string { return wire.WebhookSecret(master, issuer) }

// SignWebhook is the value of the signature header for body sent at timestamp ts (unix seconds).
func SignWebhook(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte("."))
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// CheckWebhookURL validates a webhook URL before a task is accepted: absolute https (http too when
// allowPrivate, development only), a host, no user info, no fragment, at most MaxWebhookURL bytes; an IP
// literal must be one netdeny does not deny unless allowPrivate. Host names are checked again when delivering
// (every address dialled must be public). Errors are invalid_argument.
func CheckWebhookURL(raw string, allowPrivate bool) (*url.URL, error) {
	if len(raw) > MaxWebhookURL {
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url is longer than %d bytes", MaxWebhookURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url: %v", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate:
	default:
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url must be https, not %q", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url needs a host")
	}
	if u.User != nil {
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url must not carry user info")
	}
	if u.Fragment != "" {
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url must not carry a fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, wire.Errorf(wire.InvalidArgument, "webhook url port %q is not a port", p)
		}
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && !allowPrivate && netdeny.Denied(ip) {
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url names a non-public address %s", ip)
	}
	if strings.EqualFold(u.Hostname(), "localhost") && !allowPrivate {
		return nil, wire.Errorf(wire.InvalidArgument, "webhook url names localhost")
	}
	return u, nil
}

// errPrivateAddr refuses a dial to a non-public address.
var errPrivateAddr = errors.New("webhook address is not public")

// webhookClient is the HTTP client webhooks are delivered with: no proxy, no redirects, and, unless
// allowPrivate, a dialer that refuses every address netdeny denies (the sandbox's egress filter refuses
// the same list), checked on the resolved address, so DNS cannot point a public name at an internal service.
func webhookClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if !allowPrivate {
		d.Control = webhookDialControl
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         d.DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConns:        4,
			IdleConnTimeout:     30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// webhookDialControl refuses to connect to an address netdeny denies.
func webhookDialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || netdeny.Denied(ap.Addr()) {
		return fmt.Errorf("%w: %s", errPrivateAddr, address)
	}
	return nil
}

// maxWebhookWait bounds one wait between deliveries of a webhook.
const maxWebhookWait = time.Minute

// deliverWebhook POSTs body to u, signed, retrying failures (connection errors, 408, 429 and 5xx) up to
// attempts times, waiting first about first and doubling (jittered, internal/backoff: the webhooks of
// tasks that failed together do not retry in step); other 4xx answers are final. It returns the
// delivery's status.
func deliverWebhook(ctx context.Context, c *http.Client, u, id, secret string, body []byte, attempts int,
	first time.Duration, now func() time.Time) WebhookStatus {
	st := WebhookStatus{URL: u}
	wait := backoff.New(first, maxWebhookWait)
	for i := 0; i < attempts; i++ {
		if i > 0 && !wait.Wait(ctx) {
			st.LastError = "cancelled: " + ctx.Err().Error()
			return st
		}
		st.Attempts++
		retry, err := postWebhook(ctx, c, u, id, secret, body, now().Unix())
		if err == nil {
			st.Delivered, st.LastError = true, ""
			return st
		}
		st.LastError = err.Error()
		if !retry {
			return st
		}
	}
	return st
}

func postWebhook(ctx context.Context, c *http.Client, u, id, secret string, body []byte, ts int64) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "warren-webhook/1")
	req.Header.Set(HeaderWebhookID, id)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderWebhookSignature, SignWebhook(secret, ts, body))
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, errPrivateAddr) {
			return false, errPrivateAddr
		}
		return true, fmt.Errorf("post: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, fmt.Errorf("answered %d", resp.StatusCode)
	default:
		return false, fmt.Errorf("answered %d", resp.StatusCode)
	}
}
