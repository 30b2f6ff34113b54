package devstack

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// WebhookSecretFile is the file in the data dir holding the operator's webhook secret (the master every
// issuer's webhook secret is derived from, wire.WebhookSecret): 32 random bytes, hex, written 0600 on the
// first start and kept across restarts, so the secrets a customer backend was given stay valid.
const WebhookSecretFile = "webhook-secret"

// WebhookSecretPath is the webhook secret's file in dataDir.
func WebhookSecretPath(dataDir string) string { return filepath.Join(dataDir, WebhookSecretFile) }

// ensureWebhookMaster reads the data dir's webhook secret, writing a random one first when there is none.
func ensureWebhookMaster(dataDir string) ([]byte, error) {
	path := WebhookSecretPath(dataDir)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("devstack: webhook secret: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		switch {
		case errors.Is(err, fs.ErrExist): // another warren dev wrote it meanwhile: read that one
		case err != nil:
			return nil, fmt.Errorf("devstack: webhook secret: %w", err)
		default:
			_, werr := f.WriteString(hex.EncodeToString(b) + "\n")
			if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
				_ = os.Remove(path)
				return nil, fmt.Errorf("devstack: write webhook secret: %w", err)
			}
		}
	}
	return runner.ReadWebhookMaster(path)
}

// WebhookSecret is the secret issuer's task webhooks are signed with in this stack (what
// `warren webhook-secret -issuer ISS` and GET /v1/issuers/{iss}/webhook-secret print); "" when the stack
// runs with NoWebhooks.
func (s *Stack) WebhookSecret(issuer string) string {
	if len(s.webhookMaster) == 0 {
		return ""
	}
	return wire.WebhookSecret(s.webhookMaster, issuer)
}
