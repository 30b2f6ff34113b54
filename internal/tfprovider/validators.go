package tfprovider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/warren-mesh/warren/billing"
)

// nameValidator refuses at plan time what the billing API refuses as an issuer, user or model name
// (billing.ValidName), or as an issuer's display name when empty is allowed (billing.ValidIssuerName).
type nameValidator struct{ allowEmpty bool }

func (v nameValidator) Description(context.Context) string {
	if v.allowEmpty {
		return fmt.Sprintf("at most %d bytes of UTF-8 without control characters", billing.MaxNameLen)
	}
	return fmt.Sprintf("1 to %d bytes of UTF-8 without control characters", billing.MaxNameLen)
}

func (v nameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v nameValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	ok := billing.ValidName(s)
	if v.allowEmpty {
		ok = billing.ValidIssuerName(s)
	}
	if !ok {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid Warren name",
			fmt.Sprintf("%s must be %s, as the billing API requires; got %d bytes.", req.Path, v.Description(ctx), len(s)))
	}
}

// limitValidators are a quota's budget limits': -1 (unlimited) or more.
func limitValidators() []validator.Int64 {
	return []validator.Int64{int64validator.AtLeast(billing.Unlimited)}
}

// optionalLimitValidators are a sandbox limit's: -1 (unlimited), 0 (not set) or at least min, the
// smallest limit the billing API accepts for it.
func optionalLimitValidators(min int64) []validator.Int64 {
	if min <= 1 {
		return limitValidators()
	}
	return []validator.Int64{optionalLimit{min: min}}
}

// optionalLimit refuses a sandbox limit below -1 or between 0 and its minimum, in the API's words; with a
// max (billing.SandboxFieldBounds), -1 and anything above max too.
type optionalLimit struct{ min, max int64 }

func (v optionalLimit) Description(context.Context) string {
	if v.max > 0 {
		return fmt.Sprintf("0 (not set) or %d to %d", v.min, v.max)
	}
	return fmt.Sprintf("-1 (unlimited), 0 (not set) or at least %d", v.min)
}

func (v optionalLimit) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v optionalLimit) ValidateInt64(ctx context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	n := req.ConfigValue.ValueInt64()
	bad := n < billing.Unlimited || (n > 0 && n < v.min)
	if v.max > 0 {
		bad = n < 0 || (n > 0 && (n < v.min || n > v.max))
	}
	if bad {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid Warren sandbox limit",
			fmt.Sprintf("%s must be %s, not %d.", req.Path, v.Description(ctx), n))
	}
}
