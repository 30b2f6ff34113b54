package billing

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
)

// apiKeyRequest is the body of POST /v1/issuers/{iss}/api-keys. A missing name is the empty name.
type apiKeyRequest struct {
	Name *string `json:"name"`
}

// NewAPIKey is the answer of POST /v1/issuers/{iss}/api-keys, the only time the secret is shown.
// Exported for the API's Go clients (billing/adminclient).
type NewAPIKey struct {
	APIKey
	Secret string `json:"secret"`
}

// authenticateAPIKey checks the secret of key id against the store on every request (no cache), so a
// revocation holds on every billing instance from the next request on. The stored hash is compared in
// constant time; an unknown, revoked or wrong key is the same unauthenticated answer.
func (a *API) authenticateAPIKey(r *http.Request, id, secret string) (string, error) {
	k, hash, err := a.cfg.Store.LookupAPIKey(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
	case errors.Is(err, ErrUnavailable):
		return "", wire.Wrap(wire.Unavailable, err, "the API keys cannot be read")
	case err != nil:
		return "", fmt.Errorf("look up api key: %w", err)
	case httpx.KeyEqual(hex.EncodeToString(HashAPIKeySecret(secret)), hex.EncodeToString(hash)):
		return k.Issuer, nil
	}
	a.m.authFailures.WithLabelValues("api_key").Inc()
	a.logger(r).Info("api key rejected", "kid", id, "remote", r.RemoteAddr)
	return "", wire.Errorf(wire.Unauthenticated, "the API key was rejected (unknown or revoked)")
}

// authorize lets the admin key call any route, and an issuer's API key only a scoped route for its own
// issuer (the usage report checks its iss filter itself).
func (a *API) authorize(r *http.Request, rt route) error {
	scope := info(r).keyIssuer
	switch {
	case scope == "":
		return nil
	case !rt.scoped:
		return wire.Errorf(wire.PermissionDenied, "the API key of issuer %s may not call %s %s: it needs the admin key",
			scope, rt.method, rt.pattern)
	case strings.Contains(rt.pattern, "{iss}") && r.PathValue("iss") != scope:
		return otherIssuer(scope, r.PathValue("iss"))
	}
	return nil
}

// otherIssuer is the answer to an issuer's API key naming another issuer.
func otherIssuer(scope, iss string) error {
	return wire.Errorf(wire.PermissionDenied, "the API key of issuer %s may not act for issuer %q", scope, iss).
		WithDetails(map[string]any{"field": "iss"})
}

func (a *API) listAPIKeys(w http.ResponseWriter, r *http.Request) error {
	iss, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	keys, err := a.cfg.Store.ListAPIKeys(r.Context(), iss)
	if err != nil {
		return storeError(err, "")
	}
	return httpx.WriteJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

// createAPIKey makes a key of a registered issuer and answers its secret, once; the store keeps its hash.
func (a *API) createAPIKey(w http.ResponseWriter, r *http.Request) error {
	iss, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	var req apiKeyRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		return err
	}
	k := APIKey{Issuer: iss, Created: a.now().UTC().Truncate(1e9)}
	if req.Name != nil {
		k.Name = *req.Name
	}
	if !ValidIssuerName(k.Name) {
		return invalidField("name", "name must be at most %d bytes of UTF-8 without control characters", MaxNameLen)
	}
	id, secret, err := NewAPIKeySecret()
	if err != nil {
		return err
	}
	k.ID = id
	if err := a.cfg.Store.CreateAPIKey(r.Context(), k, HashAPIKeySecret(secret)); err != nil {
		return storeError(err, fmt.Sprintf("issuer %q is not registered: PUT /v1/issuers/%s first", iss, iss))
	}
	a.logger(r).Info("api key created", "issuer", iss, "kid", id)
	return httpx.WriteJSON(w, http.StatusCreated, NewAPIKey{APIKey: k, Secret: secret})
}

func (a *API) revokeAPIKey(w http.ResponseWriter, r *http.Request) error {
	iss, err := pathName(r, "iss")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if !ValidAPIKeyID(id) {
		return invalidField("id", "id must be a key id: ak and 16 hex digits")
	}
	if err := a.cfg.Store.RevokeAPIKey(r.Context(), iss, id); err != nil {
		return storeError(err, fmt.Sprintf("issuer %q has no API key %s", iss, id))
	}
	a.logger(r).Info("api key revoked", "issuer", iss, "kid", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
