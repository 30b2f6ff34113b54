package roles

import (
	"context"
	"flag"
	"io"
	"net/http"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/runner"
)

func init() {
	register("billing", "run the billing role: the admin API (issuers, quotas, prices, usage) over CockroachDB and Vault", runBilling)
}

func runBilling(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("billing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c roleCommon
		p prodFlags
	)
	c.register(fs, ":7200")
	p.registerVault(fs)
	p.registerDB(fs)
	p.registerS3(fs) // the workspace templates' store (warren deploy); none: no templates API
	webhookSecretFile := fs.String("webhook-secret-file", "", "the runners' -webhook-secret-file: GET /v1/issuers/{iss}/webhook-secret answers each issuer's webhook secret derived from it; unset: that route answers unavailable")
	log, err := c.parse(fs, args, stderr, "billing")
	if err != nil {
		return err
	}
	var webhookMaster []byte
	if *webhookSecretFile != "" {
		if webhookMaster, err = runner.ReadWebhookMaster(*webhookSecretFile); err != nil {
			return err
		}
	}
	keys, err := p.openVault(ctx)
	if err != nil {
		return err
	}
	defer keys.Close()
	pool, ledger, err := p.openLedger(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	metrics := newRoleMetrics()
	a, err := billing.NewAPI(billing.APIConfig{Store: ledger, Keys: keys, AdminKeys: keys.AdminKeys, Logger: log, Metrics: metrics,
		WebhookMaster: webhookMaster})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	a.Mount(mux)
	mux.Handle("/", a) // any other path: the API's own unauthenticated or not_found, never Go's plain 404
	if err := mountTemplates(ctx, mux, a, &p, metrics, log); err != nil {
		return err
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return serveRole(ctx, "billing", c, mux, metrics, stdout, log)
}
