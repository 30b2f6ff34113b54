package roles

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	billingcockroach "github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/secrets/vault"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/runner/templates"
)

func init() {
	register("billing", "run the billing role: the admin API (issuers, quotas, prices, usage) over CockroachDB and Vault", runBilling)
}

// billingFlags are warren billing's flags.
type billingFlags struct {
	common            roleCommon
	prod              prodFlags
	webhookSecretFile string
}

// register defines every flag of warren billing on fs.
func (f *billingFlags) register(fs *flag.FlagSet) {
	f.common.register(fs, ":7200")
	f.prod.registerVault(fs)
	f.prod.registerDB(fs)
	f.prod.registerS3(fs) // the workspace templates' store (warren deploy); none: no templates API
	fs.StringVar(&f.webhookSecretFile, "webhook-secret-file", "", "the runners' -webhook-secret-file: GET /v1/issuers/{iss}/webhook-secret answers each issuer's webhook secret derived from it; unset: that route answers unavailable")
}

// webhookMaster reads -webhook-secret-file; nil when it is unset.
func (f *billingFlags) webhookMaster() ([]byte, error) {
	if f.webhookSecretFile == "" {
		return nil, nil
	}
	return runner.ReadWebhookMaster(f.webhookSecretFile)
}

// config is the billing API's configuration over the ledger and the Vault store.
func (f *billingFlags) config(ledger *billingcockroach.Ledger, keys *vault.Store, webhookMaster []byte, log *slog.Logger, metrics prometheus.Registerer) billing.APIConfig {
	return billing.APIConfig{Store: ledger, Keys: keys, AdminKeys: keys.AdminKeys, Logger: log, Metrics: metrics,
		WebhookMaster: webhookMaster}
}

func runBilling(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("billing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren billing [flags]\n\nRuns the billing role: the ledger and its admin API.")
	var f billingFlags
	f.register(fs)
	log, err := f.common.parse(fs, args, stderr, "billing")
	if err != nil {
		return err
	}
	webhookMaster, err := f.webhookMaster()
	if err != nil {
		return err
	}
	keys, err := f.prod.openVault(ctx)
	if err != nil {
		return err
	}
	defer keys.Close()
	pool, ledger, err := f.prod.openLedger(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	metrics := newRoleMetrics()
	a, err := billing.NewAPI(f.config(ledger, keys, webhookMaster, log, metrics))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	a.Mount(mux)
	mux.Handle("/", a) // any other path: the API's own unauthenticated or not_found, never Go's plain 404
	if err := mountTemplates(ctx, mux, a, &f.prod, metrics, log); err != nil {
		return err
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return serveRole(ctx, "billing", f.common, mux, metrics, stdout, log)
}

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
