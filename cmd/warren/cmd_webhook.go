package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

func init() {
	register("webhook-secret", "print the secret an issuer's backend verifies its task webhooks with", runWebhookSecret)
	adminCommands["issuers webhook-secret"] = adminIssuersWebhookSecret
}

// runWebhookSecret prints an issuer's webhook secret, derived from the operator's secret file: warren dev's
// (in the data dir) unless -secret-file names the runners' -webhook-secret-file. In production the billing
// API answers it too (warren admin issuers webhook-secret ISS).
func runWebhookSecret(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhook-secret", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren webhook-secret [flags]\n\nPrints the secret an issuer's backend verifies task webhooks with.")
	issuer := fs.String("issuer", devstack.DevIssuer, "the issuer (iss) whose webhook secret to print")
	dataDir := fs.String("data-dir", env.DataDir(), "warren dev's data dir, whose "+devstack.WebhookSecretFile+" is read ($WARREN_DATA_DIR)")
	secretFile := fs.String("secret-file", "", "the operator's webhook secret file (the runners' -webhook-secret-file); default: the data dir's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !billing.ValidName(*issuer) {
		return fmt.Errorf("-issuer must be 1 to %d bytes of UTF-8 without control characters", billing.MaxNameLen)
	}
	path := *secretFile
	if path == "" {
		path = devstack.WebhookSecretPath(*dataDir)
	}
	master, err := runner.ReadWebhookMaster(path)
	if err != nil {
		if *secretFile == "" {
			return fmt.Errorf("%w (warren dev writes it on its first start; or pass -secret-file)", err)
		}
		return err
	}
	fmt.Fprintln(stdout, wire.WebhookSecret(master, *issuer))
	return nil
}

// adminIssuersWebhookSecret prints ISS's webhook secret as the billing API answers it.
func adminIssuersWebhookSecret(ctx context.Context, af *adminFlags, args []string, stdout, stderr io.Writer) error {
	fs := af.flagSet("issuers webhook-secret", stderr)
	pos, c, err := af.start(ctx, fs, args, "ISS")
	if err != nil {
		return err
	}
	got, err := c.WebhookSecret(ctx, pos[0])
	if err != nil {
		if adminclient.IsCode(err, wire.Unavailable) {
			return errors.Join(adminError{err}, errors.New("start the billing role with -webhook-secret-file (the runners' file) to read webhook secrets"))
		}
		return err
	}
	if af.json {
		return printJSON(stdout, got)
	}
	fmt.Fprintln(stdout, got.Secret)
	return nil
}
