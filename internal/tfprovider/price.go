package tfprovider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/internal/wire"
)

// priceResource is warren_price: a model's price override (PUT /v1/prices/{model}), in microdollars per
// million tokens, applied to models whose name starts with model (the longest such override wins).
type priceResource struct{ base }

func newPriceResource() resource.Resource { return &priceResource{} }

type priceModel struct {
	ID            types.String `tfsdk:"id"`
	Model         types.String `tfsdk:"model"`
	Input         types.Int64  `tfsdk:"input"`
	Output        types.Int64  `tfsdk:"output"`
	CacheRead     types.Int64  `tfsdk:"cache_read"`
	CacheCreation types.Int64  `tfsdk:"cache_creation"`
}

func (m *priceModel) price() billing.Price {
	return billing.Price{Input: m.Input.ValueInt64(), Output: m.Output.ValueInt64(),
		CacheRead: m.CacheRead.ValueInt64(), CacheCreation: m.CacheCreation.ValueInt64()}
}

func (m *priceModel) fill(model string, p billing.Price) {
	m.ID, m.Model = types.StringValue(model), types.StringValue(model)
	m.Input, m.Output = types.Int64Value(p.Input), types.Int64Value(p.Output)
	m.CacheRead, m.CacheCreation = types.Int64Value(p.CacheRead), types.Int64Value(p.CacheCreation)
}

func (r *priceResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_price"
}

func (r *priceResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	price := func(what string) schema.Int64Attribute {
		return schema.Int64Attribute{Required: true,
			Description: what + " in microdollars per million tokens (0 to 10^12).",
			Validators:  []validator.Int64{int64validator.Between(0, billing.MaxPrice)}}
	}
	resp.Schema = schema.Schema{
		Description: "A model's price override. Destroying it makes the built-in price (if any) apply again.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				Description: "The model name: the import id."},
			"model": schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator{}},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Description:   "The model name, or a prefix of model names, the price applies to."},
			"input":          price("Input tokens"),
			"output":         price("Output tokens"),
			"cache_read":     price("Cache reads"),
			"cache_creation": price("Cache writes"),
		},
	}
}

func (r *priceResource) put(ctx context.Context, m *priceModel) error {
	mp, err := r.c.PutPrice(ctx, m.Model.ValueString(), m.price())
	if err == nil {
		m.fill(mp.Model, mp.Price)
	}
	return err
}

// apply writes the planned price and stores the answer in state.
func (r *priceResource) apply(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State, diags *diag.Diagnostics) {
	var m priceModel
	if diags.Append(plan.Get(ctx, &m)...); diags.HasError() {
		return
	}
	if err := r.put(ctx, &m); err != nil {
		diags.AddError("Cannot write the Warren price", err.Error())
		return
	}
	diags.Append(state.Set(ctx, &m)...)
}

// Create writes a new override; one that exists already is imported, never overwritten unseen.
func (r *priceResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var model types.String
	if resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("model"), &model)...); resp.Diagnostics.HasError() {
		return
	}
	mp, err := r.c.GetPrice(ctx, model.ValueString())
	switch {
	case err != nil:
		resp.Diagnostics.AddError("Cannot read the Warren price", err.Error())
		return
	case mp.Custom && mp.Matched == model.ValueString():
		resp.Diagnostics.AddError("The Warren price exists already",
			fmt.Sprintf("Model %s has a price override. Import it rather than create it: terraform import <address> %s", mp.Model, mp.Model))
		return
	}
	r.apply(ctx, req.Plan, &resp.State, &resp.Diagnostics)
}

func (r *priceResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.apply(ctx, req.Plan, &resp.State, &resp.Diagnostics)
}

func (r *priceResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m priceModel
	if resp.Diagnostics.Append(req.State.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	model := m.Model.ValueString()
	mp, err := r.c.GetPrice(ctx, model)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the Warren price", err.Error())
		return
	}
	if !mp.Custom || mp.Matched != model { // no override of exactly this model (any more)
		resp.State.RemoveResource(ctx)
		return
	}
	m.fill(model, mp.Price)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// Delete removes the override (the built-in price, if any, applies again); one already gone is no error.
func (r *priceResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m priceModel
	if resp.Diagnostics.Append(req.State.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.DeletePrice(ctx, m.Model.ValueString()); err != nil && !adminclient.IsCode(err, wire.NotFound) {
		resp.Diagnostics.AddError("Cannot delete the Warren price", err.Error())
	}
}

func (r *priceResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("model"), req, resp)
}
