package tfprovider

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/internal/wire"
)

// jsonFields are the JSON names of t's fields, embedded structs' included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		out = append(out, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	return out
}

// TestQuotaFieldsAreTheAPIs: warren_quota has every field of the billing API's quota, each once.
func TestQuotaFieldsAreTheAPIs(t *testing.T) {
	var names []string
	for _, f := range quotaFields {
		names = append(names, f.name)
	}
	names = append(names, "window", "revision")
	api := jsonFields(reflect.TypeFor[billing.Quota]())
	slices.Sort(names)
	slices.Sort(api)
	if !slices.Equal(names, api) {
		t.Fatalf("warren_quota's fields %v, the API's quota %v", names, api)
	}
	resp := &resource.SchemaResponse{}
	(&quotaResource{}).Schema(context.Background(), resource.SchemaRequest{}, resp)
	for _, n := range api {
		if _, ok := resp.Schema.Attributes[n]; !ok {
			t.Errorf("warren_quota's schema lacks %s", n)
		}
	}
}

// TestQuotaMapping: a quota with a distinct value in every field goes into a Terraform state and back
// unchanged, and each field lands in the attribute of its name.
func TestQuotaMapping(t *testing.T) {
	ctx := context.Background()
	resp := &resource.SchemaResponse{}
	(&quotaResource{}).Schema(ctx, resource.SchemaRequest{}, resp)
	state := tfsdk.State{Schema: resp.Schema, Raw: tftypes.NewValue(resp.Schema.Type().TerraformType(ctx), nil)}
	var q billing.Quota
	for i, f := range quotaFields {
		*f.field(&q) = int64(1000 + i)
	}
	q.Window, q.Revision = billing.Week, 7
	for _, k := range []billing.QuotaKey{{Issuer: "acme"}, {Issuer: "a/b", User: "bob smith"}} {
		if d := setQuota(ctx, &state, k, q); d.HasError() {
			t.Fatal(d)
		}
		gotK, gotQ, d := quotaFrom(ctx, state)
		if d.HasError() {
			t.Fatal(d)
		}
		if gotK != k || gotQ != q {
			t.Fatalf("round trip: %+v %+v, want %+v %+v", gotK, gotQ, k, q)
		}
		for i, f := range quotaFields {
			var v types.Int64
			state.GetAttribute(ctx, path.Root(f.name), &v)
			if v.ValueInt64() != int64(1000+i) {
				t.Errorf("%s = %v, want %d", f.name, v, 1000+i)
			}
		}
		var id types.String
		state.GetAttribute(ctx, path.Root("id"), &id)
		if back, err := parseQuotaID(id.ValueString()); err != nil || back != k {
			t.Errorf("id %q reads back as %+v, %v", id.ValueString(), back, err)
		}
	}
}

func TestParseQuotaID(t *testing.T) {
	for id, want := range map[string]billing.QuotaKey{
		"acme":             {Issuer: "acme"},
		"acme/alice":       {Issuer: "acme", User: "alice"},
		"a%2Fb/c%2Fd":      {Issuer: "a/b", User: "c/d"},
		"acme/bob%20smith": {Issuer: "acme", User: "bob smith"},
	} {
		if got, err := parseQuotaID(id); err != nil || got != want {
			t.Errorf("parseQuotaID(%q) = %+v, %v; want %+v", id, got, err, want)
		}
	}
	for _, id := range []string{"", "/alice", "acme/", "acme/%zz", "%zz", "acme/a/b", "acme/\x00", strings.Repeat("x", 257)} {
		if k, err := parseQuotaID(id); err == nil {
			t.Errorf("parseQuotaID(%q) = %+v, want an error", id, k)
		}
	}
}

// FuzzParseQuotaID: an import id is read or refused, never panics, and what is read names valid names and
// writes back to an id that reads the same.
func FuzzParseQuotaID(f *testing.F) {
	for _, s := range []string{"acme", "acme/alice", "a%2Fb/c", "%", "/", "a//b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		k, err := parseQuotaID(id)
		if err != nil {
			return
		}
		if !billing.ValidName(k.Issuer) || (k.User != "" && !billing.ValidName(k.User)) {
			t.Fatalf("%q read as invalid names %+v", id, k)
		}
		if back, err := parseQuotaID(quotaID(k)); err != nil || back != k {
			t.Fatalf("%q: %+v writes back as %q, read as %+v, %v", id, k, quotaID(k), back, err)
		}
	})
}

// validateInt64 runs v on n and reports whether it was accepted.
func validateInt64(v validator.Int64, n int64) bool {
	resp := &validator.Int64Response{}
	v.ValidateInt64(context.Background(), validator.Int64Request{Path: path.Root("x"), ConfigValue: types.Int64Value(n)}, resp)
	return !resp.Diagnostics.HasError()
}

func validateString(v validator.String, s string) bool {
	resp := &validator.StringResponse{}
	v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("x"), ConfigValue: types.StringValue(s)}, resp)
	return !resp.Diagnostics.HasError()
}

// TestValidatorsAgreeWithTheAPI: each validator accepts exactly what the billing API's own check does.
func TestValidatorsAgreeWithTheAPI(t *testing.T) {
	resp := &resource.SchemaResponse{}
	(&quotaResource{}).Schema(context.Background(), resource.SchemaRequest{}, resp)
	for _, f := range quotaFields {
		vs := resp.Schema.Attributes[f.name].(schema.Int64Attribute).Validators
		for _, n := range []int64{-3, -2, -1, 0, 1, f.min - 1, f.min, f.min + 1, billing.MaxSandboxProcessLogBytes,
			billing.MaxSandboxProcessLogBytes + 1, 1 << 40} {
			q := billing.Quota{Window: billing.Day}
			*f.field(&q) = n
			apiOK := q.ValidateFor(billing.QuotaKey{Issuer: "acme"}) == nil // the API's own check
			got := true
			for _, v := range vs {
				got = got && validateInt64(v, n)
			}
			if got != apiOK {
				t.Errorf("%s = %d: validator accepts %v, the API %v", f.name, n, got, apiOK)
			}
		}
	}
	for _, s := range []string{"", "acme", "a/b", "with space", "tab\t", "nul\x00", "zw\u200b", "\xff", strings.Repeat("é", 128), strings.Repeat("é", 129)} {
		if got, want := validateString(nameValidator{}, s), billing.ValidName(s); got != want {
			t.Errorf("name %q: validator %v, API %v", s, got, want)
		}
		if got, want := validateString(nameValidator{allowEmpty: true}, s), billing.ValidIssuerName(s); got != want {
			t.Errorf("display name %q: validator %v, API %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{"2026-01-02": true, "2026-01-02T15:04:05Z": true, "2026-01-02T15:04:05.5+02:00": true,
		"yesterday": false, "2026-13-01": false, "": false, "2026-01-02 15:04": false} {
		if got := validateString(timeValidator{}, s); got != want {
			t.Errorf("time %q: validator %v, want %v", s, got, want)
		}
	}
}

// TestClientErrors: an error answer keeps its wire code and request id; a huge answer is refused.
func TestClientErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
		}
		switch r.URL.Path {
		case "/v1/issuers/a%2Fb", "/v1/issuers/a/b":
			if r.URL.RawPath != "/v1/issuers/a%2Fb" {
				t.Errorf("issuer a/b sent as %q", r.URL.RawPath)
			}
			w.Header().Set("X-Request-Id", "req-1")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(wire.Errorf(wire.NotFound, "issuer %q is not registered", "a/b"))
		default:
			w.Write([]byte(`{"iss":"` + strings.Repeat("x", adminclient.DefaultMaxAnswerBytes) + `"}`))
		}
	}))
	defer srv.Close()
	c, err := newClient("test", srv.URL, "k", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetIssuer(context.Background(), "a/b")
	if !adminclient.IsCode(err, wire.NotFound) || !strings.Contains(err.Error(), "request id req-1") || !strings.Contains(err.Error(), `issuer "a/b" is not registered`) {
		t.Fatalf("getIssuer(a/b) = %v", err)
	}
	if _, err := c.GetIssuer(context.Background(), "big"); err == nil || !strings.Contains(err.Error(), "answer over") {
		t.Fatalf("a huge answer: %v", err)
	}
	for _, bad := range [][3]string{{"ftp://x", "k", ""}, {"http://", "k", ""}, {"http://x", "", ""}, {"http://x", "k", "x"}, {"http://x?a=b", "k", ""}} {
		if _, err := newClient("test", bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("newClient(%q) accepted", bad)
		}
	}
}

func TestValidVersion(t *testing.T) {
	for v, want := range map[string]bool{"0.1.0": true, "1.22.333": true, "1.2": false, "1.2.3.4": false, "01.2.3": false,
		"1.2.3-rc1": false, "v1.2.3": false, "": false, "dev": false} {
		if ValidVersion(v) != want {
			t.Errorf("ValidVersion(%q) = %v", v, !want)
		}
	}
}
