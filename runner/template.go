package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/runner/templates"
)

// restoreTemplate starts a new sandbox (no snapshot of its own) from its issuer's workspace template, when
// there is one (docs/ARCHITECTURE.md#templates). A store that fails fails the start, as a snapshot's would:
// starting empty instead would silently hand the user a sandbox without the files it should have.
func (r *Runner) restoreTemplate(ctx context.Context) error {
	name := r.cfg.Template
	if name == "-" {
		return nil
	}
	if name == "" {
		name = templates.DefaultName
	}
	restores := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_runner_template_restores_total",
		Help: "Starts of a new sandbox from its issuer's workspace template, by result: restored, none (no template) or error.",
	}, []string{"result"})
	if err := r.metrics.reg.Register(restores); err != nil {
		return fmt.Errorf("template metrics: %w", err)
	}
	start := time.Now()
	version, st, ok, err := templates.Restore(ctx, templates.RestoreConfig{
		Store: r.cfg.Snapshots, Region: r.cfg.snapshotRegion(), Regions: r.cfg.SnapshotRegions,
		Issuer: r.cfg.Issuer, Name: name, Workspace: r.cfg.Workspace, Logger: r.log.With("component", "template"),
	})
	switch {
	case err != nil:
		restores.WithLabelValues("error").Inc()
		return fmt.Errorf("restore workspace template %q: %w", name, err)
	case !ok:
		restores.WithLabelValues("none").Inc()
		r.log.Info("no workspace template: the sandbox starts empty", "template", name)
	default:
		restores.WithLabelValues("restored").Inc()
		r.log.Info("workspace template restored", "template", name, "version", version, "files", st.Files,
			"bytes", st.Bytes, "ms", time.Since(start).Milliseconds())
	}
	return nil
}
