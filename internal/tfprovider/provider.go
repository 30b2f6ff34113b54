// Package tfprovider is Warren's Terraform provider: platform teams manage issuers, their keys, quotas and
// model prices as code through the billing API (docs/PROTOCOL.md#billing-api), and read regions and usage.
// It ships inside the warren binary: `warren terraform-provider`, or warren run under a name starting with
// terraform-provider-warren (how Terraform runs it from a filesystem mirror). README.md#terraform-provider
// says how to install and use it; terraform/examples/provider has a configuration.
package tfprovider

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/warren-mesh/warren/billing/adminclient"
	warren "github.com/warren-mesh/warren/sdk"
)

// Address is the provider's source address: configurations name it as source = "warren/warren", and a
// filesystem mirror holds it under registry.terraform.io/warren/warren/VERSION/OS_ARCH/.
const Address = "registry.terraform.io/warren/warren"

// Serve serves the provider to Terraform (the go-plugin handshake on stdout) until Terraform is done with
// it. version is the provider's version Terraform was told (a semantic version).
func Serve(ctx context.Context, version string) error {
	return providerserver.Serve(ctx, New(version), providerserver.ServeOpts{Address: Address, ProtocolVersion: 6})
}

// New returns the provider's factory for version.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &warrenProvider{version: version} }
}

type warrenProvider struct{ version string }

type providerModel struct {
	URL      types.String `tfsdk:"url"`
	AdminKey types.String `tfsdk:"admin_key"`
	EdgeURL  types.String `tfsdk:"edge_url"`
}

func (p *warrenProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "warren"
	resp.Version = p.version
}

func (p *warrenProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Manages Warren's issuers, keys, quotas and prices through its billing API, and reads regions and usage.",
		Attributes: map[string]schema.Attribute{
			"url": schema.StringAttribute{Optional: true,
				Description: "The billing API's base URL (default $WARREN_BILLING_URL, else $WARREN_URL, else http://127.0.0.1:8080: `warren dev`)."},
			"admin_key": schema.StringAttribute{Optional: true, Sensitive: true,
				Description: "An admin key of the billing API (default $WARREN_ADMIN_KEY)."},
			"edge_url": schema.StringAttribute{Optional: true,
				Description: "An edge's base URL, read by the warren_regions data source (default $WARREN_EDGE_URL, else url)."},
		},
	}
}

// firstSet is the first non-empty of vs.
func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func (p *warrenProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.URL.IsUnknown() || m.AdminKey.IsUnknown() || m.EdgeURL.IsUnknown() {
		resp.Diagnostics.AddError("Unknown Warren provider configuration",
			"url, admin_key and edge_url must be known when Terraform plans: set them from variables or the environment, not from resources of the same run.")
		return
	}
	c, err := newClient(p.version,
		firstSet(m.URL.ValueString(), os.Getenv("WARREN_BILLING_URL"), os.Getenv("WARREN_URL"), "http://127.0.0.1:8080"),
		firstSet(m.AdminKey.ValueString(), os.Getenv("WARREN_ADMIN_KEY")),
		firstSet(m.EdgeURL.ValueString(), os.Getenv("WARREN_EDGE_URL")))
	if err != nil {
		resp.Diagnostics.AddError("Invalid Warren provider configuration", err.Error())
		return
	}
	resp.ResourceData, resp.DataSourceData = c, c
}

// newClient checks the provider's settings and returns the client; edge "" is the billing URL.
func newClient(version, base, key, edge string) (*client, error) {
	base, err := checkBaseURL("url", base)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("no admin key: set admin_key or $WARREN_ADMIN_KEY (warren dev keeps one in its data dir's secrets.json)")
	}
	if edge == "" {
		edge = base
	}
	if edge, err = checkBaseURL("edge_url", edge); err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: requestTimeout}
	ua := "terraform-provider-warren/" + version
	ec, err := warren.New(edge, "", warren.WithHTTPClient(hc), warren.WithUserAgent(ua))
	if err != nil {
		return nil, err
	}
	ac, err := adminclient.New(adminclient.Config{URL: base, Key: key, UserAgent: ua, Timeout: requestTimeout})
	if err != nil {
		return nil, err
	}
	return &client{Client: ac, edge: ec}, nil
}

func (p *warrenProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newIssuerResource, newQuotaResource, newPriceResource}
}

func (p *warrenProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newRegionsDataSource, newUsageDataSource}
}

// The interfaces Terraform relies on, checked at compile time.
var (
	_ resource.ResourceWithImportState        = &issuerResource{}
	_ resource.ResourceWithModifyPlan         = &issuerResource{}
	_ resource.ResourceWithConfigure          = &issuerResource{}
	_ resource.ResourceWithImportState        = &quotaResource{}
	_ resource.ResourceWithValidateConfig     = &quotaResource{}
	_ resource.ResourceWithConfigure          = &quotaResource{}
	_ resource.ResourceWithImportState        = &priceResource{}
	_ resource.ResourceWithConfigure          = &priceResource{}
	_ datasource.DataSourceWithConfigure      = &regionsDataSource{}
	_ datasource.DataSourceWithValidateConfig = &usageDataSource{}
	_ datasource.DataSourceWithConfigure      = &usageDataSource{}
)
