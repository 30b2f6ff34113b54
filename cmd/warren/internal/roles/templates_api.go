package roles

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/runner/templates"
)

// mountTemplates serves the workspace templates' admin API beside the billing API when a snapshot store
// (-s3-bucket) is configured: the store of the runners of this region.
func mountTemplates(ctx context.Context, mux *http.ServeMux, a *billing.API, p *prodFlags, reg prometheus.Registerer, log *slog.Logger) error {
	if p.s3Bucket == "" {
		log.Info("no -s3-bucket: the workspace templates API (warren deploy) is off")
		return nil
	}
	store, err := p.openS3(ctx)
	if err != nil {
		return fmt.Errorf("templates store: %w", err)
	}
	ts, err := templates.New(templates.Config{Blobs: store, Logger: log.With("component", "templates"), Metrics: reg})
	if err != nil {
		return err
	}
	mux.Handle("/v1/admin/templates/", templates.Handler(ts, a.Authenticate, log.With("component", "templates")))
	return nil
}
