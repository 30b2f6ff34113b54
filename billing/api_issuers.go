package billing

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/wire"
)

// issuerRequest is the body of PUT /v1/issuers/{iss}. A missing name is the empty name.
type issuerRequest struct {
	Name *string `json:"name"`
}

// keyResponse is the answer of POST /v1/issuers/{iss}/keys, the only time the secret is shown.
type keyResponse struct {
	KeyID string `json:"kid"`
	// Secret is the string to give the customer: a text secret "wsk_...", whose UTF-8 bytes are the HS256 key
	// (what JWT libraries do with a string secret), so it is used as given, never decoded.
	Secret string `json:"secret"`
}

func (a *API) listIssuers(w http.ResponseWriter, r *http.Request) error {
	list, err := a.cfg.Store.ListIssuers(r.Context())
	if err != nil {
		return storeError(err, "")
	}
	if list == nil {
		list = []Issuer{}
	}
	return httpx.WriteJSON(w, http.StatusOK, map[string]any{"issuers": list})
}

func (a *API) getIssuer(w http.ResponseWriter, r *http.Request) error {
	id, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	iss, err := a.cfg.Store.GetIssuer(r.Context(), id)
	if err != nil {
		return storeError(err, fmt.Sprintf("issuer %q is not registered", id))
	}
	return httpx.WriteJSON(w, http.StatusOK, iss)
}

func (a *API) putIssuer(w http.ResponseWriter, r *http.Request) error {
	id, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	var req issuerRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		return err
	}
	name := ""
	if req.Name != nil {
		name = *req.Name
	}
	if !ValidIssuerName(name) {
		return invalidField("name", "name must be at most %d bytes of UTF-8 without control characters", MaxNameLen)
	}
	iss, err := a.cfg.Store.PutIssuer(r.Context(), id, name)
	if err != nil {
		return storeError(err, "")
	}
	return httpx.WriteJSON(w, http.StatusOK, iss)
}

// rotateKey writes a new key version of a registered issuer (its first when it has none) and answers the
// secret, once. Only the key id is logged.
func (a *API) rotateKey(w http.ResponseWriter, r *http.Request) error {
	id, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	if _, err := a.cfg.Store.GetIssuer(r.Context(), id); err != nil {
		return storeError(err, fmt.Sprintf("issuer %q is not registered: PUT /v1/issuers/%s first", id, id))
	}
	key, err := a.cfg.Keys.Rotate(id)
	if errors.Is(err, secrets.ErrUnknownIssuer) {
		var createErr error
		if key, createErr = a.cfg.Keys.CreateIssuer(id); createErr == nil {
			err = nil
		} else if key, err = a.cfg.Keys.Rotate(id); err != nil { // another request created it meanwhile
			err = errors.Join(createErr, err)
		}
	}
	switch {
	case errors.Is(err, secrets.ErrUnavailable):
		return wire.Wrap(wire.Unavailable, err, "the secret store is unavailable")
	case err != nil:
		return fmt.Errorf("write key of issuer %s: %w", id, err)
	}
	a.logger(r).Info("issuer key written", "issuer", id, "kid", key.ID)
	return httpx.WriteJSON(w, http.StatusCreated, keyResponse{KeyID: key.ID, Secret: key.Given()})
}

// disableIssuer makes every edge refuse the issuer's tokens (within the edges' admission cache TTL for the
// sandbox API; agent channels read it on every connect). Admin key only.
func (a *API) disableIssuer(w http.ResponseWriter, r *http.Request) error {
	return a.setIssuerDisabled(w, r, true)
}

// enableIssuer undoes disableIssuer.
func (a *API) enableIssuer(w http.ResponseWriter, r *http.Request) error {
	return a.setIssuerDisabled(w, r, false)
}

func (a *API) setIssuerDisabled(w http.ResponseWriter, r *http.Request, disabled bool) error {
	id, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	iss, err := a.cfg.Store.SetIssuerDisabled(r.Context(), id, disabled)
	if err != nil {
		return storeError(err, fmt.Sprintf("issuer %q is not registered", id))
	}
	a.logger(r).Info("issuer state set", "issuer", id, "disabled", disabled)
	return httpx.WriteJSON(w, http.StatusOK, iss)
}
