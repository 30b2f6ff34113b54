package edge

import (
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// A careless operator's attack on max_preview_urls: an edge whose -preview-max-per-user is above the
// ceiling (the flag has no bound of its own) and a user whose quota says -1 (unlimited). Unlimited must not
// give fewer previews than the edge's own default: the ceiling is at least the flag.
func TestPreviewLimitUnlimitedNeverBelowTheFlag(t *testing.T) {
	const flag = 2 * MaxPreviewsCeiling
	for _, tc := range []struct {
		in   int64
		want int
	}{
		{0, flag}, {-1, flag}, {MaxPreviewsCeiling + 1, MaxPreviewsCeiling + 1}, {1 << 40, flag}, {5, 5},
	} {
		if got := previewLimit(&wire.SandboxLimits{PreviewURLs: tc.in}, flag); got != tc.want {
			t.Errorf("max_preview_urls %d with -preview-max-per-user %d gives %d, want %d", tc.in, flag, got, tc.want)
		}
	}
}
