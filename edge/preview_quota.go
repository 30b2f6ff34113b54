package edge

import "github.com/warren-mesh/warren/internal/wire"

// MaxPreviewsCeiling bounds a user's live preview URLs whatever the quota says: max_preview_urls -1
// (unlimited) means this many (or -preview-max-per-user when the operator set it higher), and a larger value
// is read as this, since each live preview is a row of the shared store that every create counts in its
// transaction.
const MaxPreviewsCeiling = 1000

// previewLimit is the user's limit of live previews from the grant's limits (the user's effective quota,
// max_preview_urls): def (PreviewConfig.MaxPerUser, the -preview-max-per-user flag) when not set, else the
// quota's, at most MaxPreviewsCeiling (or def when the flag is above it: unlimited never gives less than not
// set).
func previewLimit(l *wire.SandboxLimits, def int) int {
	ceiling := int64(max(MaxPreviewsCeiling, def))
	var v int64
	if l != nil {
		v = l.PreviewURLs
	}
	switch {
	case v == 0:
		return def
	case v < 0 || v > ceiling:
		return int(ceiling)
	}
	return int(v)
}
