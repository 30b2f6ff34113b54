package modelproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// countPath is the API's free token counter; the proxy asks it when a call's byte bound does not fit.
const countPath = "/v1/messages/count_tokens"

// countedInputBound is an upper bound on the input tokens of req from the upstream's count of its input:
// the count with a margin (counted/countMarginDiv more; the API calls its count an estimate that may
// differ by a little), plus one token per byte of what the count left out (the fields not in countFields
// and the proxy's own edits, bodySlack). It is used only when the byte bound (one token per byte) does not
// fit the budget: one extra upstream call, free, for calls near the end of a budget.
func (p *Proxy) countedInputBound(ctx context.Context, r *http.Request, req *messagesRequest) (int64, error) {
	body := req.countBody()
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	resp, err := p.client.Do(p.upstreamRequestTo(ctx, r, countPath, body))
	if err != nil {
		return 0, fmt.Errorf("count input tokens: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, fmt.Errorf("count input tokens: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("count input tokens: status %d: %.200s", resp.StatusCode, b)
	}
	var c struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.InputTokens == nil || *c.InputTokens < 0 {
		return 0, errors.New("count input tokens: no input_tokens in the answer")
	}
	n := *c.InputTokens
	return n + n/countMarginDiv + 1 + int64(len(req.body)-len(body)) + bodySlack, nil
}

// countMarginDiv sets the margin on a counted input: counted/countMarginDiv tokens (5%).
const countMarginDiv = 20
