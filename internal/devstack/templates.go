package devstack

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/runner/templates"
)

// mountTemplates serves the workspace templates' admin API (warren deploy) on mux, storing templates in
// the runners' snapshot store, authenticated by the billing API's admin keys.
func (s *Stack) mountTemplates(mux *http.ServeMux, api *billing.API, blobDir string, reg prometheus.Registerer) error {
	blobs, err := blobfs.New(blobDir)
	if err != nil {
		return fmt.Errorf("devstack: templates: %w", err)
	}
	tmp := filepath.Join(s.cfg.DataDir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("devstack: templates: %w", err)
	}
	log := s.log.With("component", "templates")
	ts, err := templates.New(templates.Config{Blobs: blobs, TempDir: tmp, Logger: log, Metrics: reg})
	if err != nil {
		return err
	}
	mux.Handle("/v1/admin/templates/", templates.Handler(ts, api.Authenticate, log))
	return nil
}
