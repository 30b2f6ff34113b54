package tfprovider

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/internal/wire"
)

// quotaField is one integer field of the billing API's quota (billing.Quota) and its attribute.
type quotaField struct {
	name string // the attribute's and the API's JSON name
	// required fields are the budget's (the API requires them; -1 unlimited, 0 allows nothing); the others
	// are optional, 0 (not set) unless given.
	required bool
	// min is the smallest positive value the API accepts (0: any); issuerWide fields apply to all of an
	// issuer's users together and must be 0 on a user's quota.
	min        int64
	issuerWide bool
	desc       string
	field      func(*billing.Quota) *int64
}

// quotaFields are every integer field of billing.Quota but its revision (a test checks against the JSON
// names of billing.Quota).
var quotaFields = []quotaField{
	{"ai_microdollars", true, 0, false, "AI spend per window in microdollars (-1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.AIMicros }},
	{"compute_seconds", true, 0, false, "Sandbox seconds per window (-1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.ComputeSeconds }},
	{"max_concurrent_sessions", true, 0, false, "Agent sessions a user runs at once (-1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.MaxConcurrentSessions }},
	{"max_issuer_sessions", false, 0, true, "Sessions all the issuer's users run at once (issuer default only; 0 no cap, -1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.MaxIssuerSessions }},
	{"connects_per_minute", false, 0, false, "Each user's agent connects per minute (0 the edge's default, -1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.ConnectsPerMinute }},
	{"issuer_connects_per_minute", false, 0, true, "Agent connects per minute of all the issuer's users (issuer default only; 0 the edge's default, -1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.IssuerConnectsPerMinute }},
	{"prompts_per_minute", false, 0, false, "Each user's prompts per minute (0 the edge's default, -1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.PromptsPerMinute }},
	{"issuer_prompts_per_minute", false, 0, true, "Prompts per minute of all the issuer's users (issuer default only; 0 the edge's default, -1 unlimited).",
		func(q *billing.Quota) *int64 { return &q.IssuerPromptsPerMinute }},
	{"max_processes", false, billing.MinSandboxProcesses, false, "Processes and threads alive in a sandbox at once.",
		func(q *billing.Quota) *int64 { return &q.MaxProcesses }},
	{"max_memory_bytes", false, billing.MinSandboxMemoryBytes, false, "A sandbox's memory in bytes.",
		func(q *billing.Quota) *int64 { return &q.MaxMemoryBytes }},
	{"cpu_millis", false, billing.MinSandboxCPUMillis, false, "A sandbox's CPU in thousandths of a core.",
		func(q *billing.Quota) *int64 { return &q.CPUMillis }},
	{"max_tmp_bytes", false, billing.MinSandboxTmpBytes, false, "Each command's private /tmp in bytes.",
		func(q *billing.Quota) *int64 { return &q.MaxTmpBytes }},
	{"max_workspace_bytes", false, billing.MinSandboxWorkspaceBytes, false, "Bytes stored under /workspace.",
		func(q *billing.Quota) *int64 { return &q.MaxWorkspaceBytes }},
	{"max_concurrent_execs", false, billing.MinSandboxConcurrentExecs, false, "Commands running at once in a sandbox.",
		func(q *billing.Quota) *int64 { return &q.MaxConcurrentExecs }},
	{"max_stored_bytes", false, billing.MinSandboxStoredBytes, false, "Bytes the user's snapshots keep in the blob store.",
		func(q *billing.Quota) *int64 { return &q.MaxStoredBytes }},
	{"max_background_processes", false, billing.MinSandboxBackgroundProcesses, false, "Background processes running at once in a sandbox (0 the runner's -max-processes, -1 the runner's ceiling).",
		func(q *billing.Quota) *int64 { return &q.MaxBackgroundProcesses }},
	{"max_process_log_bytes", false, billing.MinSandboxProcessLogBytes, false, "Output kept of each background process in bytes (0 the runner's -process-log-bytes; never unlimited, as the runner holds it in memory).",
		func(q *billing.Quota) *int64 { return &q.MaxProcessLogBytes }},
	{"max_file_watches", false, billing.MinSandboxFileWatches, false, "File watches at once in a sandbox (0 the runner's default, -1 the runner's ceiling).",
		func(q *billing.Quota) *int64 { return &q.MaxFileWatches }},
	{"max_terminals", false, billing.MinSandboxTerminals, false, "Terminals running at once in a sandbox (0 the runner's default, -1 the runner's ceiling).",
		func(q *billing.Quota) *int64 { return &q.MaxTerminals }},
	{"max_tasks", false, billing.MinSandboxTasks, false, "One-shot tasks a user has queued or running (0 the runner's -max-tasks, -1 the runner's ceiling).",
		func(q *billing.Quota) *int64 { return &q.MaxTasks }},
	{"max_preview_urls", false, billing.MinSandboxPreviewURLs, false, "Live preview URLs of a user (0 the edge's -preview-max-per-user, -1 the edge's ceiling).",
		func(q *billing.Quota) *int64 { return &q.MaxPreviewURLs }},
}

// windows are the budget windows the API accepts.
var windows = []string{string(billing.Hour), string(billing.Day), string(billing.Week), string(billing.Month), string(billing.Lifetime)}

// quotaResource is warren_quota: an issuer's default quota (sub unset) or one user's override of it
// (PUT /v1/quotas/{iss}[/users/{sub}]), written with the revision last read so a change made meanwhile
// (say through `warren admin`) is a conflict, never overwritten unseen.
type quotaResource struct{ base }

func newQuotaResource() resource.Resource { return &quotaResource{} }

func (r *quotaResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_quota"
}

func (r *quotaResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	attrs := map[string]schema.Attribute{
		"id": schema.StringAttribute{Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			Description: "ISS, or ISS/SUB for a user's quota (each part URL-path-escaped): the import id."},
		"iss": schema.StringAttribute{Required: true, PlanModifiers: replace, Validators: []validator.String{nameValidator{}},
			Description: "The issuer."},
		"sub": schema.StringAttribute{Optional: true, PlanModifiers: replace, Validators: []validator.String{nameValidator{}},
			Description: "The user whose override this is; unset: the issuer's default quota."},
		"window": schema.StringAttribute{Required: true, Validators: []validator.String{stringvalidator.OneOf(windows...)},
			Description: "The budget window: hour, day, week, month or lifetime."},
		"revision": schema.Int64Attribute{Computed: true,
			Description: "The quota's revision, counting its writes; a write names the one read."},
	}
	for _, f := range quotaFields {
		if f.required {
			attrs[f.name] = schema.Int64Attribute{Required: true, Description: f.desc, Validators: limitValidators()}
			continue
		}
		desc := f.desc
		vs := optionalLimitValidators(f.min)
		if _, max, _, ok := billing.SandboxFieldBounds(f.name); ok && max > 0 {
			desc += fmt.Sprintf(" 0 not set, else %d to %d.", f.min, max)
			vs = []validator.Int64{optionalLimit{min: f.min, max: max}}
		} else if f.min > 1 {
			desc += fmt.Sprintf(" 0 not set, -1 unlimited, else at least %d.", f.min)
		}
		attrs[f.name] = schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(0),
			Description: desc, Validators: vs}
	}
	resp.Schema = schema.Schema{
		Description: "An issuer's default quota, or one user's override of it: every field of the billing API's quota. " +
			"Destroying a user's override makes the issuer's default apply to that user again; destroying an issuer's default leaves its users without an issuer cap.",
		Attributes: attrs,
	}
}

// attrGetter is a plan, state or configuration.
type attrGetter interface {
	GetAttribute(ctx context.Context, p path.Path, target any) diag.Diagnostics
}

// attrSetter is a plan or state being written.
type attrSetter interface {
	SetAttribute(ctx context.Context, p path.Path, val any) diag.Diagnostics
}

// quotaFrom reads the quota's key and fields from a plan or state.
func quotaFrom(ctx context.Context, g attrGetter) (billing.QuotaKey, billing.Quota, diag.Diagnostics) {
	var (
		diags            diag.Diagnostics
		iss, sub, window types.String
		revision         types.Int64
		q                billing.Quota
	)
	diags.Append(g.GetAttribute(ctx, path.Root("iss"), &iss)...)
	diags.Append(g.GetAttribute(ctx, path.Root("sub"), &sub)...)
	diags.Append(g.GetAttribute(ctx, path.Root("window"), &window)...)
	diags.Append(g.GetAttribute(ctx, path.Root("revision"), &revision)...)
	for _, f := range quotaFields {
		var v types.Int64
		diags.Append(g.GetAttribute(ctx, path.Root(f.name), &v)...)
		*f.field(&q) = v.ValueInt64()
	}
	q.Window, q.Revision = billing.Window(window.ValueString()), revision.ValueInt64()
	return billing.QuotaKey{Issuer: iss.ValueString(), User: sub.ValueString()}, q, diags
}

// setQuota writes the quota stored under k into a state.
func setQuota(ctx context.Context, s attrSetter, k billing.QuotaKey, q billing.Quota) diag.Diagnostics {
	var diags diag.Diagnostics
	sub := types.StringNull()
	if k.User != "" {
		sub = types.StringValue(k.User)
	}
	diags.Append(s.SetAttribute(ctx, path.Root("id"), quotaID(k))...)
	diags.Append(s.SetAttribute(ctx, path.Root("iss"), k.Issuer)...)
	diags.Append(s.SetAttribute(ctx, path.Root("sub"), sub)...)
	diags.Append(s.SetAttribute(ctx, path.Root("window"), string(q.Window))...)
	diags.Append(s.SetAttribute(ctx, path.Root("revision"), q.Revision)...)
	for _, f := range quotaFields {
		diags.Append(s.SetAttribute(ctx, path.Root(f.name), *f.field(&q))...)
	}
	return diags
}

// quotaID is k's import id: ISS or ISS/SUB, each part path-escaped so a '/' in a name stays unambiguous.
func quotaID(k billing.QuotaKey) string {
	if k.User == "" {
		return url.PathEscape(k.Issuer)
	}
	return url.PathEscape(k.Issuer) + "/" + url.PathEscape(k.User)
}

// parseQuotaID reads an import id written by quotaID, checking both names as the API would.
func parseQuotaID(id string) (billing.QuotaKey, error) {
	issPart, subPart, hasSub := strings.Cut(id, "/")
	iss, err := url.PathUnescape(issPart)
	if err != nil || !billing.ValidName(iss) {
		return billing.QuotaKey{}, fmt.Errorf("import id %q: want ISS or ISS/SUB, each a valid name, path-escaped (%%2F for a '/' in a name)", id)
	}
	k := billing.QuotaKey{Issuer: iss}
	if hasSub {
		sub, err := url.PathUnescape(subPart)
		if err != nil || !billing.ValidName(sub) || strings.Contains(subPart, "/") {
			return billing.QuotaKey{}, fmt.Errorf("import id %q: the user after '/' is not a valid name (path-escaped, %%2F for a '/')", id)
		}
		k.User = sub
	}
	return k, nil
}

// ValidateConfig refuses at plan time what PUT would refuse: issuer-wide fields on a user's quota.
func (r *quotaResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var sub types.String
	if resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("sub"), &sub)...); resp.Diagnostics.HasError() || sub.IsNull() || sub.IsUnknown() {
		return
	}
	for _, f := range quotaFields {
		if !f.issuerWide {
			continue
		}
		var v types.Int64
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root(f.name), &v)...)
		if !v.IsNull() && !v.IsUnknown() && v.ValueInt64() != 0 {
			resp.Diagnostics.AddAttributeError(path.Root(f.name), "Issuer-wide limit on a user's quota",
				fmt.Sprintf("%s applies to all of the issuer's users together: set it on the issuer's quota (sub unset), not on a user's.", f.name))
		}
	}
}

// write PUTs the planned quota with expected as its revision and stores the answer in state.
func (r *quotaResource) write(ctx context.Context, plan attrGetter, state attrSetter, expected int64, diags *diag.Diagnostics) {
	k, q, d := quotaFrom(ctx, plan)
	if diags.Append(d...); diags.HasError() {
		return
	}
	answer, err := r.c.PutQuota(ctx, k, q, expected)
	stored := answer.Quota
	switch {
	case adminclient.IsCode(err, wire.Conflict) && expected == 0:
		diags.AddError("The Warren quota exists already",
			fmt.Sprintf("Quota %s exists already. Import it rather than create it: terraform import <address> %s", quotaID(k), quotaID(k)))
		return
	case adminclient.IsCode(err, wire.Conflict):
		diags.AddError("The Warren quota changed since Terraform read it",
			fmt.Sprintf("%v. Run terraform plan again to see the change, then apply.", err))
		return
	case err != nil:
		diags.AddError("Cannot write the Warren quota", err.Error())
		return
	}
	diags.Append(setQuota(ctx, state, k, stored)...)
}

func (r *quotaResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.write(ctx, req.Plan, &resp.State, 0, &resp.Diagnostics)
}

func (r *quotaResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	_, prior, d := quotaFrom(ctx, req.State)
	if resp.Diagnostics.Append(d...); resp.Diagnostics.HasError() {
		return
	}
	r.write(ctx, req.Plan, &resp.State, prior.Revision, &resp.Diagnostics)
}

func (r *quotaResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	k, _, d := quotaFrom(ctx, req.State)
	if resp.Diagnostics.Append(d...); resp.Diagnostics.HasError() {
		return
	}
	answer, err := r.c.GetQuota(ctx, k)
	q := answer.Quota
	switch {
	case adminclient.IsCode(err, wire.NotFound):
		resp.State.RemoveResource(ctx)
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot read the Warren quota", err.Error())
		return
	}
	resp.Diagnostics.Append(setQuota(ctx, &resp.State, k, q)...)
}

// Delete deletes the quota at the revision Terraform read: one changed since (say through `warren admin`)
// is a conflict, not deleted unseen. A quota already gone is no error.
func (r *quotaResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	k, q, d := quotaFrom(ctx, req.State)
	if resp.Diagnostics.Append(d...); resp.Diagnostics.HasError() {
		return
	}
	err := r.c.DeleteQuota(ctx, k, q.Revision)
	switch {
	case adminclient.IsCode(err, wire.NotFound):
	case adminclient.IsCode(err, wire.Conflict):
		resp.Diagnostics.AddError("The Warren quota changed since Terraform read it",
			fmt.Sprintf("%v. Run terraform plan (or destroy) again to see the change first.", err))
	case err != nil:
		resp.Diagnostics.AddError("Cannot delete the Warren quota", err.Error())
	}
}

func (r *quotaResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	k, err := parseQuotaID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import id for warren_quota", err.Error())
		return
	}
	sub := types.StringNull()
	if k.User != "" {
		sub = types.StringValue(k.User)
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("iss"), k.Issuer)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("sub"), sub)...)
}
