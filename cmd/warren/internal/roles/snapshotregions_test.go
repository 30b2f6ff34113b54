package roles

import (
	"flag"
	"io"
	"testing"

	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
)

func TestSnapshotRegionFlags(t *testing.T) {
	prod := &prodFlags{s3Endpoint: "http://own:9000", s3Region: "us-east-1", s3PathStyle: true}
	for spec, want := range map[string]storeSpec{
		"file:///var/lib/b": {dir: "/var/lib/b"},
		"s3://snaps-b":      {s3: &blobs3.Config{Endpoint: "http://own:9000", Region: "us-east-1", Bucket: "snaps-b", PathStyle: true}},
		"s3://snaps-b/a/b/?endpoint=https://s3.eu-west-1.amazonaws.com&region=eu-west-1&path-style=false": {s3: &blobs3.Config{
			Endpoint: "https://s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "snaps-b", Prefix: "a/b"}},
	} {
		got, err := parseStoreSpec(spec, prod)
		if err != nil {
			t.Errorf("%s: %v", spec, err)
			continue
		}
		if got.dir != want.dir || (got.s3 == nil) != (want.s3 == nil) || got.s3 != nil && *got.s3 != *want.s3 {
			t.Errorf("%s: got %+v %+v, want %+v %+v", spec, got, got.s3, want, want.s3)
		}
	}

	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	regions := snapshotRegions{}
	fs.Var(regions, "snapshot-region", snapshotRegionUsage)
	if err := fs.Parse([]string{"-snapshot-region", "eu-west=s3://b", "-snapshot-region=us-east=file://" + t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if len(regions) != 2 || regions["eu-west"] != "s3://b" {
		t.Fatalf("parsed %v", regions)
	}
	for _, bad := range []string{
		"eu-west=s3://c",      // twice
		"EU=s3://b",           // region name
		"-a=s3://b",           // region name
		"b",                   // no store
		"b=",                  // no store
		"b=http://bucket",     // scheme
		"b=s3://",             // no bucket
		"b=s3://k@bucket",     // credentials in the spec
		"b=s3://b?acl=public", // unknown setting
		"b=s3://b?region=a&region=b",
		"b=s3://b?path-style=maybe",
		"b=file://host/dir",
		"b=file:///dir?x=1",
		"b=file:relative",
	} {
		if err := regions.Set(bad); err == nil {
			t.Errorf("-snapshot-region %s accepted", bad)
		}
	}
	if _, err := regions.open(t.Context(), "us-east", prod); err == nil {
		t.Error("opening the own region's store among the others succeeded")
	}
	stores, err := regions.open(t.Context(), "ap-south", prod)
	if err != nil || len(stores) != 2 {
		t.Fatalf("open: %v, %v", stores, err)
	}
}
