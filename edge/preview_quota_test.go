package edge

import (
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// A user's preview limit is the quota's max_preview_urls when set, else the edge's flag; -1 and anything
// past the ceiling are the ceiling.
func TestPreviewLimitFromQuota(t *testing.T) {
	for _, tc := range []struct {
		in   *wire.SandboxLimits
		want int
	}{
		{nil, 20}, {&wire.SandboxLimits{Terminals: 2}, 20}, {&wire.SandboxLimits{PreviewURLs: 1}, 1},
		{&wire.SandboxLimits{PreviewURLs: 50}, 50}, {&wire.SandboxLimits{PreviewURLs: -1}, MaxPreviewsCeiling},
		{&wire.SandboxLimits{PreviewURLs: 1 << 40}, MaxPreviewsCeiling},
	} {
		if got := previewLimit(tc.in, 20); got != tc.want {
			t.Errorf("previewLimit(%+v, 20) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
