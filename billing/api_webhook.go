package billing

import (
	"fmt"
	"net/http"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
)

// webhookSecretResponse is the answer of GET /v1/issuers/{iss}/webhook-secret.
type webhookSecretResponse struct {
	Issuer string `json:"iss"`
	// Secret is the key the issuer's backend verifies task webhooks with (docs/PROTOCOL.md#tasks): hex,
	// used as given (its UTF-8 bytes are the HMAC key).
	Secret string `json:"webhook_secret"`
}

// webhookSecret answers a registered issuer's webhook secret, derived from the operator's
// (APIConfig.WebhookMaster). It is never stored and never logged; asking again answers the same secret.
func (a *API) webhookSecret(w http.ResponseWriter, r *http.Request) error {
	id, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	if _, err := a.cfg.Store.GetIssuer(r.Context(), id); err != nil {
		return storeError(err, fmt.Sprintf("issuer %q is not registered", id))
	}
	if len(a.cfg.WebhookMaster) == 0 {
		return wire.Errorf(wire.Unavailable, "task webhooks are not configured: this billing role has no webhook secret (warren billing -webhook-secret-file, the runners' file)")
	}
	a.logger(r).Info("issuer webhook secret read", "issuer", id)
	return httpx.WriteJSON(w, http.StatusOK, webhookSecretResponse{Issuer: id, Secret: wire.WebhookSecret(a.cfg.WebhookMaster, id)})
}
