package roles

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warren-mesh/warren/edge"
	previewscockroach "github.com/warren-mesh/warren/internal/previews/cockroach"
)

// previewFlags configure the edge's preview URLs (docs/ARCHITECTURE.md#previews): always on, kept in the
// database every region shares.
type previewFlags struct {
	domain string
	max    int
}

func (f *previewFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.domain, "preview-domain", os.Getenv("WARREN_PREVIEW_DOMAIN"), "wildcard domain whose names reach the edges (*.DOMAIN): preview URLs are https://<token>.DOMAIN/, each on its own origin; a lower-case DNS name of two labels or more, checked at start; unset: no preview URLs (path-based ones would share the edge's origin: warren dev only) ($WARREN_PREVIEW_DOMAIN)")
	def, _ := strconv.Atoi(os.Getenv("WARREN_PREVIEW_MAX_PER_USER"))
	fs.IntVar(&f.max, "preview-max-per-user", def, "live preview URLs per user (0: 20) ($WARREN_PREVIEW_MAX_PER_USER)")
}

// config opens the preview store in pool. Preview URLs take the scheme of the region's public URL
// (-public-url): behind a load balancer that ends TLS the edge sees plain HTTP, yet clients use https.
func (f *previewFlags) config(ctx context.Context, pool *pgxpool.Pool, publicURL string) (*edge.PreviewConfig, error) {
	if f.max < 0 {
		return nil, fmt.Errorf("-preview-max-per-user must not be negative")
	}
	st, err := previewscockroach.New(ctx, pool)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(publicURL)
	if err != nil {
		return nil, fmt.Errorf("-public-url: %w", err)
	}
	return &edge.PreviewConfig{Store: st, Domain: f.domain, MaxPerUser: f.max, Scheme: u.Scheme}, nil
}
