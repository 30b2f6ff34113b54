package adminclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/warren-mesh/warren/billing"
)

// escape escapes one path segment: issuer, user and model names may hold '/'.
func escape(s string) string { return url.PathEscape(s) }

func issuerPath(iss string) string { return "/v1/issuers/" + escape(iss) }

// ListIssuers is GET /v1/issuers: every registered issuer with its default quota.
func (c *Client) ListIssuers(ctx context.Context) ([]billing.Issuer, error) {
	var out struct {
		Issuers []billing.Issuer `json:"issuers"`
	}
	err := c.Call(ctx, http.MethodGet, "/v1/issuers", nil, nil, &out)
	return out.Issuers, err
}

// GetIssuer is GET /v1/issuers/{iss}; an unregistered issuer is wire.NotFound.
func (c *Client) GetIssuer(ctx context.Context, iss string) (billing.Issuer, error) {
	var out billing.Issuer
	err := c.Call(ctx, http.MethodGet, issuerPath(iss), nil, nil, &out)
	return out, err
}

// PutIssuer is PUT /v1/issuers/{iss}: register iss, or rename it.
func (c *Client) PutIssuer(ctx context.Context, iss, name string) (billing.Issuer, error) {
	var out billing.Issuer
	err := c.Call(ctx, http.MethodPut, issuerPath(iss), nil, map[string]string{"name": name}, &out)
	return out, err
}

// Key is a new key version of an issuer: its id and secret, answered only once.
type Key struct {
	KeyID  string `json:"kid"`
	Secret string `json:"secret"`
}

// RotateKey is POST /v1/issuers/{iss}/keys: write a new key version of iss.
func (c *Client) RotateKey(ctx context.Context, iss string) (Key, error) {
	var out Key
	err := c.Call(ctx, http.MethodPost, issuerPath(iss)+"/keys", nil, nil, &out)
	if err == nil && (out.KeyID == "" || out.Secret == "") {
		err = fmt.Errorf("POST /v1/issuers/%s/keys answered no key id or secret", escape(iss))
	}
	return out, err
}

// WebhookSecret is an issuer's webhook secret, which its backend verifies task webhooks with.
type WebhookSecret struct {
	Issuer string `json:"iss"`
	Secret string `json:"webhook_secret"`
}

// WebhookSecret is GET /v1/issuers/{iss}/webhook-secret; wire.Unavailable when the billing role has no
// -webhook-secret-file.
func (c *Client) WebhookSecret(ctx context.Context, iss string) (WebhookSecret, error) {
	var out WebhookSecret
	err := c.Call(ctx, http.MethodGet, issuerPath(iss)+"/webhook-secret", nil, nil, &out)
	return out, err
}

// Quota is a quota as the API answers it: with the issuer and, for an override, the user it belongs to.
type Quota struct {
	Issuer string `json:"iss"`
	User   string `json:"sub,omitempty"`
	billing.Quota
}

// QuotaPath is the API path of the quota under k: an issuer's default, or a user's override.
func QuotaPath(k billing.QuotaKey) string {
	p := "/v1/quotas/" + escape(k.Issuer)
	if k.User != "" {
		p += "/users/" + escape(k.User)
	}
	return p
}

// GetQuota is GET /v1/quotas/{iss}[/users/{sub}]; none set is wire.NotFound.
func (c *Client) GetQuota(ctx context.Context, k billing.QuotaKey) (Quota, error) {
	var out Quota
	err := c.Call(ctx, http.MethodGet, QuotaPath(k), nil, nil, &out)
	return out, err
}

// PutQuota writes q under k if its current revision is expected (0: none yet), else wire.Conflict. The
// body is q with expected in its revision field, which is what PUT /v1/quotas/... reads.
func (c *Client) PutQuota(ctx context.Context, k billing.QuotaKey, q billing.Quota, expected int64) (Quota, error) {
	q.Revision = expected
	var out Quota
	err := c.Call(ctx, http.MethodPut, QuotaPath(k), nil, q, &out)
	return out, err
}

// DeleteQuota deletes the quota under k if its revision is revision, else wire.Conflict.
func (c *Client) DeleteQuota(ctx context.Context, k billing.QuotaKey, revision int64) error {
	return c.Call(ctx, http.MethodDelete, QuotaPath(k), url.Values{"revision": {strconv.FormatInt(revision, 10)}}, nil, nil)
}

// UsageQuery selects a usage report: From and To are RFC 3339 times or dates (UTC), as the API reads them;
// Issuer, User and GroupBy may be empty (all issuers, all users, the API's default grouping).
type UsageQuery struct {
	Issuer, User string
	From, To     string
	GroupBy      billing.GroupBy
}

func (q UsageQuery) values() url.Values {
	v := url.Values{}
	for _, p := range []struct{ name, value string }{
		{"iss", q.Issuer}, {"sub", q.User}, {"from", q.From}, {"to", q.To}, {"group_by", string(q.GroupBy)},
	} {
		if p.value != "" {
			v.Set(p.name, p.value)
		}
	}
	return v
}

// ErrTooManyRows is Usage's error for a report of more rows than asked for: a report cut short must not
// look complete.
var ErrTooManyRows = errors.New("the usage report has more rows than the bound")

// Usage is GET /v1/usage, every page of it: at most maxRows rows (0: no bound but the answer's), else
// ErrTooManyRows. The report's NextCursor is "".
func (c *Client) Usage(ctx context.Context, q UsageQuery, maxRows int) (billing.UsageReport, error) {
	v := q.values()
	limit := billing.MaxUsageLimit
	if maxRows > 0 {
		limit = min(maxRows, limit)
	}
	v.Set("limit", strconv.Itoa(limit))
	var report billing.UsageReport
	for {
		var page billing.UsageReport
		if err := c.Call(ctx, http.MethodGet, "/v1/usage", v, nil, &page); err != nil {
			return billing.UsageReport{}, err
		}
		rows := append(report.Rows, page.Rows...)
		report, report.Rows = page, rows
		if maxRows > 0 && len(report.Rows) > maxRows {
			return billing.UsageReport{}, fmt.Errorf("%w of %d", ErrTooManyRows, maxRows)
		}
		if page.NextCursor == "" {
			if report.Rows == nil {
				report.Rows = []billing.UsageReportRow{}
			}
			return report, nil
		}
		v.Set("cursor", page.NextCursor)
	}
}

// UsageCSV is GET /v1/usage as CSV, every row, copied to w as it comes.
func (c *Client) UsageCSV(ctx context.Context, q UsageQuery, w io.Writer) error {
	return c.Export(ctx, "/v1/usage", q.values(), "text/csv", w)
}

// UsageKey is a usage row's group key, whichever the grouping: its sub, day or model ("" for compute when
// grouped by model).
func UsageKey(r billing.UsageReportRow) string {
	for _, k := range []*string{r.User, r.Day, r.Model} {
		if k != nil {
			return *k
		}
	}
	return ""
}

// PriceTable is GET /v1/prices: the price of unknown models and every model's built-in or custom price.
type PriceTable struct {
	Default billing.Price `json:"default"`
	Models  []struct {
		Model  string        `json:"model"`
		Price  billing.Price `json:"price"`
		Custom bool          `json:"custom"`
	} `json:"models"`
}

// ListPrices is GET /v1/prices.
func (c *Client) ListPrices(ctx context.Context) (PriceTable, error) {
	var out PriceTable
	err := c.Call(ctx, http.MethodGet, "/v1/prices", nil, nil, &out)
	return out, err
}

// ModelPrice is a model's price: the longest name prefix it matched and whether that is an override.
type ModelPrice struct {
	Model   string        `json:"model"`
	Price   billing.Price `json:"price"`
	Matched string        `json:"matched"`
	Custom  bool          `json:"custom"`
}

func pricePath(model string) string { return "/v1/prices/" + escape(model) }

// GetPrice is GET /v1/prices/{model}: the price model is charged at.
func (c *Client) GetPrice(ctx context.Context, model string) (ModelPrice, error) {
	var out ModelPrice
	err := c.Call(ctx, http.MethodGet, pricePath(model), nil, nil, &out)
	return out, err
}

// PutPrice is PUT /v1/prices/{model}: override model's price.
func (c *Client) PutPrice(ctx context.Context, model string, p billing.Price) (ModelPrice, error) {
	var out ModelPrice
	err := c.Call(ctx, http.MethodPut, pricePath(model), nil, p, &out)
	return out, err
}

// DeletePrice is DELETE /v1/prices/{model}: remove model's override; none is wire.NotFound.
func (c *Client) DeletePrice(ctx context.Context, model string) error {
	return c.Call(ctx, http.MethodDelete, pricePath(model), nil, nil, nil)
}

// ListAPIKeys is GET /v1/issuers/{iss}/api-keys: the issuer's live API keys, without their secrets.
func (c *Client) ListAPIKeys(ctx context.Context, iss string) ([]billing.APIKey, error) {
	var out struct {
		Keys []billing.APIKey `json:"keys"`
	}
	err := c.Call(ctx, http.MethodGet, issuerPath(iss)+"/api-keys", nil, nil, &out)
	return out.Keys, err
}

// CreateAPIKey is POST /v1/issuers/{iss}/api-keys: a new API key of iss, its secret answered only once.
func (c *Client) CreateAPIKey(ctx context.Context, iss, name string) (billing.NewAPIKey, error) {
	var out billing.NewAPIKey
	err := c.Call(ctx, http.MethodPost, issuerPath(iss)+"/api-keys", nil, map[string]string{"name": name}, &out)
	if err == nil && (out.ID == "" || out.Secret == "") {
		err = fmt.Errorf("POST /v1/issuers/%s/api-keys answered no key id or secret", escape(iss))
	}
	return out, err
}

// RevokeAPIKey is DELETE /v1/issuers/{iss}/api-keys/{id}: every billing instance refuses the key from
// the next request on. A key iss does not have is wire.NotFound.
func (c *Client) RevokeAPIKey(ctx context.Context, iss, id string) error {
	return c.Call(ctx, http.MethodDelete, issuerPath(iss)+"/api-keys/"+escape(id), nil, nil, nil)
}

// SetIssuerDisabled is POST /v1/issuers/{iss}/disable (or /enable): every edge refuses a disabled issuer's
// tokens. An unregistered issuer is wire.NotFound.
func (c *Client) SetIssuerDisabled(ctx context.Context, iss string, disabled bool) (billing.Issuer, error) {
	verb := "/enable"
	if disabled {
		verb = "/disable"
	}
	var out billing.Issuer
	err := c.Call(ctx, http.MethodPost, issuerPath(iss)+verb, nil, nil, &out)
	return out, err
}
