package warren

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
)

// Shapes of the protocol, re-exported so programs outside this module can name them.
type (
	SessionOptions = wire.SessionOptions
	SystemPrompt   = wire.SystemPrompt
	MCPServer      = wire.MCPServer
	MCPTool        = wire.MCPTool
	ExecRequest    = wire.ExecRequest
	ExecResult     = wire.ExecResult
	FileInfo       = wire.FileInfo
	FileWritten    = wire.FileWritten
)

// DefaultUserAgent is the User-Agent sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "warren-go-sdk"

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// Client talks to one Warren edge on behalf of one end user (the subject of its token). It is safe for
// concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	ua    string
	// failover, when set, makes sessions reconnect when their edge is lost (WithFailover).
	failover *Failover
	// wt, when set, chooses the agent channel's transport (WithTransport); nil: WebSocket.
	wt *wtState
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client use hc for REST calls and the WebSocket handshake. Streams (exec output,
// file bodies, the agent channel) can outlive any hc.Timeout, so prefer contexts for deadlines.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.ua = ua }
}

// New returns a Client for the edge at baseURL ("https://warren.example.com" or "http://127.0.0.1:8080";
// a path prefix is kept) that authenticates with token, the JWT the customer's backend minted for the user.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, wire.Errorf(wire.InvalidArgument, "warren: edge url: %v", err)
	}
	switch u.Scheme {
	case "http", "https":
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return nil, wire.Errorf(wire.InvalidArgument, "warren: edge url %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, wire.Errorf(wire.InvalidArgument, "warren: edge url %q has no host", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	c := &Client{base: u, token: token, hc: &http.Client{}, ua: DefaultUserAgent}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// URL returns the edge's base URL.
func (c *Client) URL() string { return c.base.String() }

func (c *Client) endpoint(path string, q url.Values) string {
	u := *c.base
	u.Path += path
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func (c *Client) header(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if c.ua != "" {
		h.Set("User-Agent", c.ua)
	}
}

// do sends req with the client's credentials. A non-2xx answer becomes an *Error (its body is consumed and
// closed); on success the caller owns resp.Body.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	c.header(req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, wire.ReadHTTPError(resp.StatusCode, body)
	}
	return resp, nil
}

// doJSON sends in (when not nil) as a JSON body and decodes a JSON answer into out (when not nil).
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("warren: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, q), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("warren: decode answer of %s %s: %w", method, path, err)
	}
	return nil
}
