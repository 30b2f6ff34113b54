package tfprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// maxAnswerBytes bounds every answer read from the billing API (a usage page of 1000 rows is far smaller):
// the provider does not trust the server it talks to with its memory.
const maxAnswerBytes = 4 << 20

// requestTimeout bounds one call to the billing API; Terraform's own cancellation (Ctrl-C) ends it sooner.
const requestTimeout = 60 * time.Second

// client calls the billing API (docs/PROTOCOL.md#billing-api) with an admin key, as `warren admin` does.
type client struct {
	base string // http(s)://host:port, no trailing slash
	key  string
	edge *warren.Client // an edge, for GET /v1/regions (the Go SDK's client: no token needed there)
	http *http.Client
	ua   string // the User-Agent
}

// apiError is an error answer of the billing API: its wire error and the request id the server logged it
// under, so an operator can find the server's side.
type apiError struct {
	method, path string
	requestID    string
	err          *wire.Error
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s %s: %s (%s)", e.method, e.path, e.err.Message, e.err.Code)
	if e.requestID != "" {
		s += ", request id " + e.requestID
	}
	return s
}

func (e *apiError) Unwrap() error { return e.err }

// isCode reports whether err is an answer of the API with code c.
func isCode(err error, c wire.Code) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == c
}

// checkBaseURL checks a base URL from the provider's configuration.
func checkBaseURL(name, s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%s %q: want http(s)://host[:port][/prefix]", name, s)
	}
	return strings.TrimRight(s, "/"), nil
}

// escape escapes one path segment (issuer, user and model names may hold '/').
func escape(s string) string { return url.PathEscape(s) }

// call sends method path with body as JSON (when not nil) and decodes the JSON answer into out.
func (c *client) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode the request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	target := c.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.ua)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{method: method, path: path, requestID: resp.Header.Get("X-Request-Id"),
			err: wire.ReadHTTPError(resp.StatusCode, data)}
	}
	if out == nil { // an answer without a body (204)
		return nil
	}
	if len(data) > maxAnswerBytes {
		return fmt.Errorf("%s %s: answer over %d bytes", method, path, maxAnswerBytes)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// issuer is an issuer as the API answers it.
type issuer struct {
	ID      string    `json:"iss"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

func (c *client) getIssuer(ctx context.Context, iss string) (issuer, error) {
	var out issuer
	err := c.call(ctx, http.MethodGet, "/v1/issuers/"+escape(iss), nil, nil, &out)
	return out, err
}

func (c *client) putIssuer(ctx context.Context, iss, name string) (issuer, error) {
	var out issuer
	err := c.call(ctx, http.MethodPut, "/v1/issuers/"+escape(iss), nil, map[string]string{"name": name}, &out)
	return out, err
}

// issuerKey is a key version's id and secret, answered once by POST /v1/issuers/{iss}/keys.
type issuerKey struct {
	KeyID  string `json:"kid"`
	Secret string `json:"secret"`
}

func (c *client) rotateKey(ctx context.Context, iss string) (issuerKey, error) {
	var out issuerKey
	err := c.call(ctx, http.MethodPost, "/v1/issuers/"+escape(iss)+"/keys", nil, struct{}{}, &out)
	if err == nil && (out.KeyID == "" || out.Secret == "") {
		err = fmt.Errorf("POST /v1/issuers/%s/keys answered no key id or secret", iss)
	}
	return out, err
}

// quotaPath is the API path of the quota under k.
func quotaPath(k billing.QuotaKey) string {
	p := "/v1/quotas/" + escape(k.Issuer)
	if k.User != "" {
		p += "/users/" + escape(k.User)
	}
	return p
}

func (c *client) getQuota(ctx context.Context, k billing.QuotaKey) (billing.Quota, error) {
	var out billing.Quota
	err := c.call(ctx, http.MethodGet, quotaPath(k), nil, nil, &out)
	return out, err
}

// putQuota writes q under k if its current revision is expected (0: none yet); the body is the quota with
// the expected revision in its revision field, which is what PUT /v1/quotas/... reads.
func (c *client) putQuota(ctx context.Context, k billing.QuotaKey, q billing.Quota, expected int64) (billing.Quota, error) {
	q.Revision = expected
	var out billing.Quota
	err := c.call(ctx, http.MethodPut, quotaPath(k), nil, q, &out)
	return out, err
}

// deleteQuota deletes the quota under k at revision (the one read).
func (c *client) deleteQuota(ctx context.Context, k billing.QuotaKey, revision int64) error {
	return c.call(ctx, http.MethodDelete, quotaPath(k), url.Values{"revision": {fmt.Sprint(revision)}}, nil, nil)
}

// modelPrice is GET /v1/prices/{model}.
type modelPrice struct {
	Model   string        `json:"model"`
	Price   billing.Price `json:"price"`
	Matched string        `json:"matched"`
	Custom  bool          `json:"custom"`
}

func (c *client) getPrice(ctx context.Context, model string) (modelPrice, error) {
	var out modelPrice
	err := c.call(ctx, http.MethodGet, "/v1/prices/"+escape(model), nil, nil, &out)
	return out, err
}

func (c *client) deletePrice(ctx context.Context, model string) error {
	return c.call(ctx, http.MethodDelete, "/v1/prices/"+escape(model), nil, nil, nil)
}

func (c *client) putPrice(ctx context.Context, model string, p billing.Price) (modelPrice, error) {
	var out modelPrice
	err := c.call(ctx, http.MethodPut, "/v1/prices/"+escape(model), nil, p, &out)
	return out, err
}

// usageKey is a usage row's group key, whichever the grouping.
func usageKey(r billing.UsageReportRow) string {
	for _, k := range []*string{r.User, r.Day, r.Model} {
		if k != nil {
			return *k
		}
	}
	return ""
}

// usage reads every page of a usage query, at most maxRows rows (an error past that: a report cut short
// must not look complete).
func (c *client) usage(ctx context.Context, q url.Values, maxRows int) ([]billing.UsageReportRow, billing.UsageTotals, error) {
	var rows []billing.UsageReportRow
	q.Set("limit", fmt.Sprint(min(maxRows, billing.MaxUsageLimit)))
	for {
		var page billing.UsageReport
		if err := c.call(ctx, http.MethodGet, "/v1/usage", q, nil, &page); err != nil {
			return nil, billing.UsageTotals{}, err
		}
		rows = append(rows, page.Rows...)
		if len(rows) > maxRows {
			return nil, billing.UsageTotals{}, fmt.Errorf("the usage report has more than max_rows = %d rows: narrow it (iss, sub, from, to) or raise max_rows", maxRows)
		}
		if page.NextCursor == "" {
			return rows, page.Totals, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

func (c *client) regions(ctx context.Context) (warren.Regions, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return c.edge.Regions(ctx)
}
