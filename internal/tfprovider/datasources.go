package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
)

// regionsDataSource is warren_regions: the regions an edge lists (GET /v1/regions) with their public URLs
// and health, e.g. for DNS or a status page.
type regionsDataSource struct{ dataBase }

func newRegionsDataSource() datasource.DataSource { return &regionsDataSource{} }

type regionModel struct {
	Name         types.String `tfsdk:"name"`
	URL          types.String `tfsdk:"url"`
	WebTransport types.String `tfsdk:"webtransport"`
	Health       types.String `tfsdk:"health"`
	Edges        types.Int64  `tfsdk:"edges"`
}

type regionsModel struct {
	Region  types.String  `tfsdk:"region"`
	Regions []regionModel `tfsdk:"regions"`
}

func (d *regionsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_regions"
}

func (d *regionsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The regions with live edges, as the provider's edge_url lists them (GET /v1/regions).",
		Attributes: map[string]schema.Attribute{
			"region": schema.StringAttribute{Computed: true, Description: "The region of the edge that answered."},
			"regions": schema.ListNestedAttribute{Computed: true, Description: "Every region with live edges, by name.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":         schema.StringAttribute{Computed: true},
					"url":          schema.StringAttribute{Computed: true, Description: "The region's public base URL."},
					"webtransport": schema.StringAttribute{Computed: true, Description: "Its WebTransport URL, when it has one."},
					"health":       schema.StringAttribute{Computed: true, Description: "ok, or draining when all its edges drain."},
					"edges":        schema.Int64Attribute{Computed: true, Description: "Its live edges."},
				}}},
		},
	}
}

func (d *regionsDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	rs, err := d.c.regions(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Cannot list Warren's regions", err.Error())
		return
	}
	m := regionsModel{Region: types.StringValue(rs.Region), Regions: []regionModel{}}
	for _, r := range rs.Regions {
		m.Regions = append(m.Regions, regionModel{Name: types.StringValue(r.Name), URL: types.StringValue(r.URL),
			WebTransport: types.StringValue(r.WebTransport), Health: types.StringValue(r.Health), Edges: types.Int64Value(int64(r.Edges))})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// usageDataSource is warren_usage: usage and cost over a time range (GET /v1/usage), grouped by user, day
// or model, every page read.
type usageDataSource struct{ dataBase }

func newUsageDataSource() datasource.DataSource { return &usageDataSource{} }

// Bounds of max_rows.
const (
	defaultUsageRows = 10_000
	maxUsageRows     = 100_000
)

type usageRowModel struct {
	Issuer         types.String `tfsdk:"iss"`
	Key            types.String `tfsdk:"key"`
	AIMicros       types.Int64  `tfsdk:"ai_microdollars"`
	ComputeSeconds types.Int64  `tfsdk:"compute_seconds"`
	Events         types.Int64  `tfsdk:"events"`
}

type usageModel struct {
	Issuer         types.String    `tfsdk:"iss"`
	User           types.String    `tfsdk:"sub"`
	From           types.String    `tfsdk:"from"`
	To             types.String    `tfsdk:"to"`
	GroupBy        types.String    `tfsdk:"group_by"`
	MaxRows        types.Int64     `tfsdk:"max_rows"`
	Rows           []usageRowModel `tfsdk:"rows"`
	AIMicros       types.Int64     `tfsdk:"ai_microdollars"`
	ComputeSeconds types.Int64     `tfsdk:"compute_seconds"`
	Events         types.Int64     `tfsdk:"events"`
}

func (d *usageDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_usage"
}

func (d *usageDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	bound := "RFC 3339 (2026-01-02T15:04:05Z) or a date (2026-01-02, its UTC midnight)"
	resp.Schema = schema.Schema{
		Description: "Usage and cost recorded from from (inclusive) to to (exclusive), grouped by user, day or model.",
		Attributes: map[string]schema.Attribute{
			"iss": schema.StringAttribute{Optional: true, Validators: []validator.String{nameValidator{}},
				Description: "Only this issuer's usage."},
			"sub": schema.StringAttribute{Optional: true, Description: "Only this user's usage (needs iss).",
				Validators: []validator.String{nameValidator{}, stringvalidator.AlsoRequires(path.MatchRoot("iss"))}},
			"from": schema.StringAttribute{Required: true, Description: "Start, " + bound + ".", Validators: []validator.String{timeValidator{}}},
			"to":   schema.StringAttribute{Required: true, Description: "End, " + bound + ".", Validators: []validator.String{timeValidator{}}},
			"group_by": schema.StringAttribute{Optional: true, Computed: true, Description: "user (default), day or model.",
				Validators: []validator.String{stringvalidator.OneOf(string(billing.GroupByUser), string(billing.GroupByDay), string(billing.GroupByModel))}},
			"max_rows": schema.Int64Attribute{Optional: true, Computed: true,
				Description: fmt.Sprintf("Refuse a report of more rows than this (default %d, at most %d) rather than hold it cut short.", defaultUsageRows, maxUsageRows),
				Validators:  []validator.Int64{int64validator.Between(1, maxUsageRows)}},
			"rows": schema.ListNestedAttribute{Computed: true, Description: "One row per issuer and group, ordered by issuer and key.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"iss":             schema.StringAttribute{Computed: true},
					"key":             schema.StringAttribute{Computed: true, Description: "The user, the UTC day (2006-01-02) or the model (\"\" for compute time)."},
					"ai_microdollars": schema.Int64Attribute{Computed: true},
					"compute_seconds": schema.Int64Attribute{Computed: true},
					"events":          schema.Int64Attribute{Computed: true},
				}}},
			"ai_microdollars": schema.Int64Attribute{Computed: true, Description: "Total AI spend of every row."},
			"compute_seconds": schema.Int64Attribute{Computed: true, Description: "Total sandbox seconds of every row."},
			"events":          schema.Int64Attribute{Computed: true, Description: "Total usage events of every row."},
		},
	}
}

// ValidateConfig refuses a range that ends before it starts, as the API would.
func (d *usageDataSource) ValidateConfig(ctx context.Context, req datasource.ValidateConfigRequest, resp *datasource.ValidateConfigResponse) {
	var m usageModel
	if resp.Diagnostics.Append(req.Config.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	from, ferr := parseTime(m.From.ValueString())
	to, terr := parseTime(m.To.ValueString())
	if m.From.IsUnknown() || m.To.IsUnknown() || ferr != nil || terr != nil {
		return // unknown until apply, or refused by its own validator
	}
	if !from.Before(to) {
		resp.Diagnostics.AddAttributeError(path.Root("to"), "Empty usage range", "to must be after from.")
	}
}

func (d *usageDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m usageModel
	if resp.Diagnostics.Append(req.Config.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	if m.GroupBy.IsNull() {
		m.GroupBy = types.StringValue(string(billing.GroupByUser))
	}
	if m.MaxRows.IsNull() {
		m.MaxRows = types.Int64Value(defaultUsageRows)
	}
	q := adminclient.UsageQuery{Issuer: m.Issuer.ValueString(), User: m.User.ValueString(), From: m.From.ValueString(),
		To: m.To.ValueString(), GroupBy: billing.GroupBy(m.GroupBy.ValueString())}
	maxRows := int(m.MaxRows.ValueInt64())
	report, err := d.c.Usage(ctx, q, maxRows)
	if errors.Is(err, adminclient.ErrTooManyRows) {
		// A report cut short must not look complete.
		err = fmt.Errorf("the usage report has more than max_rows = %d rows: narrow it (iss, sub, from, to) or raise max_rows", maxRows)
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read Warren's usage", err.Error())
		return
	}
	rows, totals := report.Rows, report.Totals
	m.Rows = make([]usageRowModel, 0, len(rows))
	for _, r := range rows {
		m.Rows = append(m.Rows, usageRowModel{Issuer: types.StringValue(r.Issuer), Key: types.StringValue(adminclient.UsageKey(r)),
			AIMicros: types.Int64Value(r.AIMicros), ComputeSeconds: types.Int64Value(r.ComputeSeconds), Events: types.Int64Value(r.Events)})
	}
	m.AIMicros, m.ComputeSeconds, m.Events = types.Int64Value(totals.AIMicros), types.Int64Value(totals.ComputeSeconds), types.Int64Value(totals.Events)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// parseTime reads a usage bound as the API does: RFC 3339, or a date meaning its UTC midnight.
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Parse(time.DateOnly, s)
}

// timeValidator refuses a usage bound the API would.
type timeValidator struct{}

func (timeValidator) Description(context.Context) string {
	return "RFC 3339 (2026-01-02T15:04:05Z) or a date (2026-01-02)"
}

func (v timeValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v timeValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := parseTime(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid time",
			fmt.Sprintf("%s %q: want %s.", req.Path, req.ConfigValue.ValueString(), v.Description(ctx)))
	}
}
