package tfprovider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// base gives resources and data sources the provider's client.
type base struct{ c *client }

// configure takes the client from the provider's Configure; data is nil while Terraform validates.
func (b *base) configure(data any, diags interface{ AddError(string, string) }) {
	if data == nil {
		return
	}
	c, ok := data.(*client)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("want *tfprovider.client, got %T", data))
		return
	}
	b.c = c
}

func (b *base) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	b.configure(req.ProviderData, &resp.Diagnostics)
}

// dataBase is base for data sources, whose Configure has other types.
type dataBase struct{ base }

func (b *dataBase) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	b.configure(req.ProviderData, &resp.Diagnostics)
}
