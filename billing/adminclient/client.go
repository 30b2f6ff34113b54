// Package adminclient is the Go client of the billing API (docs/PROTOCOL.md#billing-api): issuers and their
// keys, quotas, usage and prices, called with an admin key. `warren admin`, `warren deploy` and the
// Terraform provider (internal/tfprovider) use it, so they share one transport: a timeout on every call, a
// bound on every answer read, a request id sent with each request and named in its errors, and typed
// errors (*Error wrapping the API's *wire.Error).
package adminclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

const (
	// DefaultTimeout bounds one call when Config.Timeout is 0; the caller's context may end it sooner.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxAnswerBytes bounds a JSON answer when Config.MaxAnswerBytes is 0: a usage page of
	// billing.MaxUsageLimit rows is far smaller. The client does not trust the server with its memory.
	DefaultMaxAnswerBytes = 4 << 20
	// maxErrorBytes bounds an error answer's body, a wire error (docs/PROTOCOL.md#errors).
	maxErrorBytes = 64 << 10
)

// Config is what New needs. URL and Key are required; the rest have defaults.
type Config struct {
	URL       string // the billing API's base URL: http(s)://host[:port][/prefix]
	Key       string // an admin key, sent as Authorization: Bearer
	UserAgent string // default "warren-adminclient"
	// Timeout bounds one call: a JSON call from sending to the answer's last byte; an upload from the
	// body's last byte to the answer's; a CSV export until the answer starts. Default DefaultTimeout.
	Timeout time.Duration
	// MaxAnswerBytes bounds a JSON answer; past it a call fails with *AnswerTooLargeError.
	// Default DefaultMaxAnswerBytes.
	MaxAnswerBytes int64
	// HTTPClient sends the requests; default http.DefaultClient. Its own Timeout, if any, also applies.
	HTTPClient *http.Client
}

// Client calls the billing API. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string // cfg.URL without a trailing slash
}

// New checks cfg and returns a client; a bad URL is ErrBadURL, a missing key ErrNoKey.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: %q: want http(s)://host[:port][/prefix]", ErrBadURL, cfg.URL)
	}
	if cfg.Key == "" {
		return nil, ErrNoKey
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "warren-adminclient"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	return &Client{cfg: cfg, base: strings.TrimRight(cfg.URL, "/")}, nil
}

// URL is the base URL the client calls, without a trailing slash.
func (c *Client) URL() string { return c.base }

// Call sends method path?q with body as JSON (when not nil) and decodes the JSON answer into out (when not
// nil; an empty answer of 204 leaves out as it is). The typed methods use it; it is exported for the admin routes served
// beside the billing API (the workspace templates, runner/templates).
func (c *Client) Call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode the request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.Timeout, &TimeoutError{After: c.cfg.Timeout})
	defer cancel()
	return c.exchange(ctx, method, path, q, "application/json", rd, out)
}

// Upload sends body (of contentType, streamed) with method to path and decodes the JSON answer into out.
// The timeout starts once the body has been sent, so a large upload is bounded only by ctx.
func (c *Client) Upload(ctx context.Context, method, path, contentType string, body io.Reader, out any) error {
	ctx, d := c.deferredTimeout(ctx)
	defer d.stop()
	rd := readerFunc(func(p []byte) (int, error) {
		n, err := body.Read(p)
		if err == io.EOF {
			d.start()
		}
		return n, err
	})
	return c.exchange(ctx, method, path, nil, contentType, rd, out)
}

// deadline is a timeout that starts when told: the transport reads an upload's body in its own goroutine.
type deadline struct {
	after  time.Duration
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  *time.Timer // guarded by mu; nil until start
	done   bool        // guarded by mu: stopped, start is a no-op
}

// deferredTimeout is ctx with a deadline of the client's timeout that runs from d.start on.
func (c *Client) deferredTimeout(ctx context.Context) (context.Context, *deadline) {
	ctx, cancel := context.WithCancelCause(ctx)
	return ctx, &deadline{after: c.cfg.Timeout, cancel: cancel}
}

func (d *deadline) start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer == nil && !d.done {
		d.timer = time.AfterFunc(d.after, func() { d.cancel(&TimeoutError{After: d.after}) })
	}
}

// disarm stops the timer for good; the context lives on.
func (d *deadline) disarm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = true
	if d.timer != nil {
		d.timer.Stop()
	}
}

// stop ends the timer and the context.
func (d *deadline) stop() {
	d.disarm()
	d.cancel(nil)
}

// Export sends GET path?q accepting contentType and copies the answer's body to w as it comes (a CSV
// export holds every row: it is streamed, not bounded). The timeout runs until the answer starts.
func (c *Client) Export(ctx context.Context, path string, q url.Values, contentType string, w io.Writer) error {
	ctx, d := c.deferredTimeout(ctx)
	defer d.stop()
	d.start()
	resp, e, err := c.send(ctx, http.MethodGet, path, q, "", nil, contentType)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	d.disarm()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return e.with(ctx, fmt.Errorf("the export broke off: %w", err))
	}
	return nil
}

// readerFunc is an io.Reader made of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// exchange sends one request and reads its bounded answer: a non-2xx status is an *Error holding the API's
// *wire.Error; a 2xx answer is decoded into out.
func (c *Client) exchange(ctx context.Context, method, path string, q url.Values, contentType string, body io.Reader, out any) error {
	resp, e, err := c.send(ctx, method, path, q, contentType, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxAnswerBytes+1))
	if err != nil {
		return e.with(ctx, fmt.Errorf("read the answer: %w", err))
	}
	if int64(len(data)) > c.cfg.MaxAnswerBytes {
		return e.with(ctx, &AnswerTooLargeError{Limit: c.cfg.MaxAnswerBytes})
	}
	if out == nil || (resp.StatusCode == http.StatusNoContent && len(data) == 0) {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return e.with(ctx, fmt.Errorf("decode the answer: %w", err))
	}
	return nil
}

// send sends one request with a fresh request id and returns a 2xx response, whose body the caller closes,
// and the error template naming the request; any other status is an *Error holding the API's *wire.Error.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, contentType string, body io.Reader, accept string) (*http.Response, *Error, error) {
	e := &Error{Method: method, Path: path, RequestID: newRequestID()}
	target := c.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, nil, e.with(ctx, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Key)
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req.Header.Set("X-Request-Id", e.RequestID)
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, nil, e.with(ctx, err)
	}
	if id := resp.Header.Get("X-Request-Id"); id != "" {
		e.RequestID = id // the id the server logged the request under
	}
	e.Status = resp.StatusCode
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return nil, nil, e.with(ctx, wire.ReadHTTPError(resp.StatusCode, data))
	}
	return resp, e, nil
}

// newRequestID is a random id the billing API accepts (docs/PROTOCOL.md: at most 64 of [A-Za-z0-9_-]).
func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
