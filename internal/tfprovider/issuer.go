package tfprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/internal/wire"
)

// issuerResource is warren_issuer: a registered issuer (PUT /v1/issuers/{iss}) and the key version
// Terraform last wrote for it (POST /v1/issuers/{iss}/keys), whose secret is a sensitive attribute.
type issuerResource struct{ base }

func newIssuerResource() resource.Resource { return &issuerResource{} }

type issuerModel struct {
	ID       types.String `tfsdk:"id"`
	Issuer   types.String `tfsdk:"iss"`
	Name     types.String `tfsdk:"name"`
	Created  types.String `tfsdk:"created"`
	Rotation types.String `tfsdk:"rotation"`
	KeyID    types.String `tfsdk:"key_id"`
	Secret   types.String `tfsdk:"secret"`
}

func (r *issuerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_issuer"
}

func (r *issuerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "An issuer (a customer's project: the iss of its users' tokens) and its signing key. The billing API " +
			"cannot delete an issuer: destroying this resource only makes Terraform forget it (with a warning).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keep, Description: "The issuer id (iss)."},
			"iss": schema.StringAttribute{Required: true, Description: "The issuer id: the iss claim of its users' tokens.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{nameValidator{}}},
			"name": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				Description: "Display name.", Validators: []validator.String{nameValidator{allowEmpty: true}}},
			"created": schema.StringAttribute{Computed: true, PlanModifiers: keep,
				Description: "When the issuer was registered (RFC 3339)."},
			"rotation": schema.StringAttribute{Optional: true,
				Description: "A rotation trigger: any value; when it changes, apply writes a new key version (key_id, secret). " +
					"The previous key stays valid (with Vault for 24 hours) so tokens already minted keep working."},
			"key_id": schema.StringAttribute{Computed: true, PlanModifiers: keep,
				Description: "The key id of the key version Terraform last wrote: the kid header of tokens signed with secret."},
			"secret": schema.StringAttribute{Computed: true, Sensitive: true, PlanModifiers: keep,
				Description: "The HS256 secret of key_id (\"wsk_...\", used as given, never decoded). Shown by the API once, " +
					"so it is known only for keys Terraform wrote: an imported issuer has none until rotation changes."},
		},
	}
}

// ModifyPlan plans a new key (unknown key_id and secret) when rotation changes.
func (r *issuerResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() {
		return // create (a key is written anyway) or destroy
	}
	var plan, state issuerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || plan.Rotation.Equal(state.Rotation) {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("key_id"), types.StringUnknown())...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("secret"), types.StringUnknown())...)
}

// put registers (or renames) the issuer and copies what the API answered into m.
func (r *issuerResource) put(ctx context.Context, m *issuerModel) error {
	iss, err := r.c.PutIssuer(ctx, m.Issuer.ValueString(), m.Name.ValueString())
	if err != nil {
		return err
	}
	m.fill(iss)
	return nil
}

func (m *issuerModel) fill(iss billing.Issuer) {
	m.ID, m.Issuer = types.StringValue(iss.ID), types.StringValue(iss.ID)
	m.Name = types.StringValue(iss.Name)
	m.Created = types.StringValue(iss.Created.UTC().Format(time.RFC3339Nano))
}

// rotate writes a new key version into m.
func (r *issuerResource) rotate(ctx context.Context, m *issuerModel) error {
	k, err := r.c.RotateKey(ctx, m.Issuer.ValueString())
	if err != nil {
		return err
	}
	m.KeyID, m.Secret = types.StringValue(k.KeyID), types.StringValue(k.Secret)
	return nil
}

func (r *issuerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m issuerModel
	if resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	// An issuer registered already is imported, never taken over: its keys are in use, and Terraform's
	// rotations would push them out.
	switch _, err := r.c.GetIssuer(ctx, m.Issuer.ValueString()); {
	case err == nil:
		resp.Diagnostics.AddError("The Warren issuer exists already",
			fmt.Sprintf("Issuer %s is registered. Import it rather than create it: terraform import <address> %s", m.Issuer.ValueString(), m.Issuer.ValueString()))
		return
	case !adminclient.IsCode(err, wire.NotFound):
		resp.Diagnostics.AddError("Cannot read the Warren issuer", err.Error())
		return
	}
	if err := r.put(ctx, &m); err != nil {
		resp.Diagnostics.AddError("Cannot register the Warren issuer", err.Error())
		return
	}
	if err := r.rotate(ctx, &m); err != nil {
		resp.Diagnostics.AddError("Cannot write the Warren issuer's key",
			fmt.Sprintf("issuer %s is registered but has no key from Terraform: %v (apply again to retry)", m.Issuer.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *issuerResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m issuerModel
	if resp.Diagnostics.Append(req.State.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	iss, err := r.c.GetIssuer(ctx, m.Issuer.ValueString())
	switch {
	case adminclient.IsCode(err, wire.NotFound):
		resp.State.RemoveResource(ctx)
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot read the Warren issuer", err.Error())
		return
	}
	m.fill(iss)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *issuerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state issuerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.put(ctx, &plan); err != nil {
		resp.Diagnostics.AddError("Cannot update the Warren issuer", err.Error())
		return
	}
	if !plan.Rotation.Equal(state.Rotation) {
		if err := r.rotate(ctx, &plan); err != nil {
			resp.Diagnostics.AddError("Cannot rotate the Warren issuer's key", err.Error())
			return
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *issuerResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m issuerModel
	if resp.Diagnostics.Append(req.State.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.AddWarning("Warren issuers cannot be deleted",
		fmt.Sprintf("The billing API has no delete: issuer %s and its keys stay registered; Terraform only forgets them.", m.Issuer.ValueString()))
}

func (r *issuerResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("iss"), req, resp)
}
