package roles

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/warren-mesh/warren/internal/blob"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/regions"
)

// snapshotRegions holds the -snapshot-region flags: region name → where that region's snapshots are
// (docs/ARCHITECTURE.md#regions). The runner reads the latest snapshot from all of them and writes only to
// its own region's store (-s3-bucket or -blob-dir).
type snapshotRegions map[string]string

const snapshotRegionUsage = "`region=store` of another region's snapshots, read to resume from the newest (repeatable): " +
	"s3://bucket[/prefix][?endpoint=URL&region=R&path-style=true] (what the query leaves out is this region's -s3-* setting; " +
	"credentials from the environment, as for -s3-bucket) or file:///dir (a directory store)"

func (s snapshotRegions) String() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, name+"="+s[name])
	}
	return strings.Join(parts, ",")
}

func (s snapshotRegions) Set(v string) error {
	name, spec, ok := strings.Cut(v, "=")
	switch {
	case !ok || spec == "":
		return fmt.Errorf("want region=store, got %q", v)
	case !regions.ValidRegion(name):
		return fmt.Errorf("region %q: 1 to 32 of [a-z0-9-], not starting or ending with -", name)
	case s[name] != "":
		return fmt.Errorf("region %s given twice", name)
	}
	if _, err := parseStoreSpec(spec, &prodFlags{}); err != nil {
		return fmt.Errorf("region %s: %w", name, err)
	}
	s[name] = spec
	return nil
}

// open opens every region's store, refusing the runner's own region (its store is -s3-bucket or -blob-dir).
func (s snapshotRegions) open(ctx context.Context, own string, prod *prodFlags) (map[string]blob.Store, error) {
	if _, ok := s[own]; ok {
		return nil, fmt.Errorf("-snapshot-region names this runner's own region %s, whose store is -s3-bucket or -blob-dir", own)
	}
	stores := make(map[string]blob.Store, len(s))
	for name, spec := range s {
		ss, err := parseStoreSpec(spec, prod)
		if err != nil {
			return nil, fmt.Errorf("-snapshot-region %s: %w", name, err)
		}
		if stores[name], err = ss.open(ctx); err != nil {
			return nil, fmt.Errorf("-snapshot-region %s: %w", name, err)
		}
	}
	return stores, nil
}

// storeSpec is a parsed store spec: a directory store or an S3 bucket (credentials not yet filled in).
type storeSpec struct {
	dir string
	s3  *blobs3.Config
}

func (ss storeSpec) open(ctx context.Context) (blob.Store, error) {
	if ss.s3 == nil {
		return blobfs.New(ss.dir)
	}
	cfg := *ss.s3
	cfg.AccessKey, cfg.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	cfg.SessionToken = os.Getenv("AWS_SESSION_TOKEN")
	return blobs3.New(ctx, cfg)
}

// parseStoreSpec reads a store spec (see snapshotRegionUsage); S3 settings the spec leaves out are prod's.
func parseStoreSpec(spec string, prod *prodFlags) (storeSpec, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return storeSpec{}, err
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" || u.Fragment != "" {
			return storeSpec{}, fmt.Errorf("%q: want file:///absolute/dir", spec)
		}
		return storeSpec{dir: u.Path}, nil
	case "s3":
	default:
		return storeSpec{}, fmt.Errorf("%q: want s3://bucket[/prefix][?endpoint=…&region=…&path-style=…] or file:///dir", spec)
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" {
		return storeSpec{}, fmt.Errorf("%q: want s3://bucket[/prefix]", spec)
	}
	cfg := blobs3.Config{
		Endpoint: prod.s3Endpoint, Region: prod.s3Region, Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"),
		PathStyle: prod.s3PathStyle,
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return storeSpec{}, fmt.Errorf("%q: %w", spec, err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return storeSpec{}, fmt.Errorf("%q: %s given %d times", spec, k, len(vs))
		}
		switch v := vs[0]; k {
		case "endpoint":
			cfg.Endpoint = v
		case "region":
			cfg.Region = v
		case "path-style":
			if cfg.PathStyle, err = strconv.ParseBool(v); err != nil {
				return storeSpec{}, fmt.Errorf("%q: path-style: %w", spec, err)
			}
		default:
			return storeSpec{}, fmt.Errorf("%q: unknown setting %q (endpoint, region, path-style)", spec, k)
		}
	}
	return storeSpec{s3: &cfg}, nil
}
