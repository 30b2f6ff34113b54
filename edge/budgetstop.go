package edge

import (
	"context"
	"encoding/json"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
)

// budgetStop says why a runner went away when it was its user's compute budget: the scheduler stops a
// sandbox whose window's compute is spent (scheduler/meter.go), and the runner, which is only told to
// stop, answers its clients as any shutdown does (unavailable, then 1001). The edge, which admitted the
// channel against that budget, reads the usage once and, when the compute is spent, sends the client
// budget_exceeded naming the budget instead, so it stops instead of reconnecting into a refusal.
type budgetStop struct {
	e   *Edge
	a   *admitted
	err *wire.Error // the budget_exceeded error, once the usage read found the compute spent
}

// spent reads a's compute usage in the current window (at most once per channel end) and reports the
// budget_exceeded error when it is at or over the budget; nil when it is not, is unlimited or cannot be
// read (the runner's own error stands then).
func (b *budgetStop) spent(ctx context.Context) *wire.Error {
	if b.err != nil || b.a == nil || b.a.claims == nil {
		return b.err
	}
	limit := b.a.budget.ComputeSeconds
	if limit < 0 {
		return nil
	}
	acct := b.a.account
	if anchor := b.a.anchor(); !anchor.IsZero() && acct.Window != billing.Lifetime {
		acct.WindowStart = billing.CurrentWindowStart(acct.Window, anchor, b.e.cfg.Now())
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	u, err := b.e.cfg.Ledger.Usage(rctx, acct)
	if err != nil {
		return nil
	}
	spent := billing.CheckUsage(acct, u, billing.Budget{AIMicros: billing.Unlimited, ComputeSeconds: limit})
	if spent == nil {
		return nil
	}
	// The same words and details as admission's refusal (budgetRefusal), and what happened.
	b.err = budgetRefusal(spent, b.a.anchor(), b.e.cfg.Now())
	b.err.Message += "; the sandbox was stopped"
	return b.err
}

// rewrite returns the runner's error frame data as the client is sent it: an unavailable error, when the
// compute budget is spent, becomes that budget_exceeded error (its seq and details, such as a prompt's
// uuid, kept); anything else as it came.
func (b *budgetStop) rewrite(ctx context.Context, data []byte) []byte {
	var m struct {
		Seq     *int64     `json:"seq"`
		Payload wire.Error `json:"payload"`
	}
	if json.Unmarshal(data, &m) != nil || m.Payload.Code != wire.Unavailable {
		return data
	}
	spent := b.spent(ctx)
	if spent == nil {
		return data
	}
	details := map[string]any{}
	for k, v := range m.Payload.Details {
		details[k] = v
	}
	for k, v := range spent.Details {
		details[k] = v
	}
	out := wire.ErrorMessage(wire.Errorf(wire.BudgetExceeded, "%s", spent.Message).WithDetails(details))
	if m.Seq != nil {
		out = wire.WithSeq(out, *m.Seq)
	}
	return out
}
