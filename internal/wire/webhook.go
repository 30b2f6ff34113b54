package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// MinWebhookMaster is the shortest operator's webhook secret (the master each issuer's secret is derived
// from) the runner and the billing role accept.
const MinWebhookMaster = 16

// WebhookSecret is the secret an issuer verifies its task webhooks with (docs/PROTOCOL.md#tasks): derived
// from the operator's secret (master) and the issuer id, so that each issuer can verify its own webhooks and
// forge no other issuer's. It is hex: HMAC-SHA256(master, "warren-webhook:" + issuer). The runner signs
// with it; the billing API and `warren webhook-secret` show it to the operator.
func WebhookSecret(master []byte, issuer string) string {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("warren-webhook:" + issuer))
	return hex.EncodeToString(m.Sum(nil))
}
