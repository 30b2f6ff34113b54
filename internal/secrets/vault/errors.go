package vault

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
)

var (
	// ErrIssuerExists is returned by CreateIssuer when the issuer has keys already. It is the file store's
	// sentinel, so callers test one value whichever store they were given.
	ErrIssuerExists = file.ErrIssuerExists
	// ErrInvalidIssuer means an issuer id is empty, longer than 256 bytes, not UTF-8 or holds control or
	// format characters (the token package's rule for iss). It is the file store's sentinel.
	ErrInvalidIssuer = file.ErrInvalidIssuer
	// ErrPermissionDenied means Vault refused the request (403): the token's policies lack a capability on
	// the path, or the token was revoked or expired.
	ErrPermissionDenied = errors.New("vault permission denied")
	// ErrConflict means a check-and-set write lost to concurrent writers twice: someone else is rotating the
	// same secret. Retrying later is safe.
	ErrConflict = errors.New("concurrent vault write")
	// ErrMalformed means a secret in Vault does not have the expected form (field missing, not base64, key too
	// short): it was written by hand or by something else.
	ErrMalformed = errors.New("malformed vault secret")
	// ErrNotFound means a secret the caller asked for by name (the model API key) is not in Vault.
	ErrNotFound = errors.New("vault secret not found")
	// ErrLogin means Vault answered a login with a refusal (wrong role, secret id or JWT): a configuration
	// error, not an outage.
	ErrLogin = errors.New("vault login refused")
)

// errCASMismatch marks a check-and-set write that found another version than it expected.
var errCASMismatch = errors.New("check-and-set version mismatch")

// classify maps an error of the Vault client: no answer (connection refused, timeout, TLS failure), 5xx,
// 429 and a sealed or standby server are secrets.ErrUnavailable; 403 is ErrPermissionDenied with need, the
// policy the request lacked; a check-and-set refusal is errCASMismatch. The caller's own cancellation stays
// context.Canceled.
func classify(op, need string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var re *vaultapi.ResponseError
	if !errors.As(err, &re) {
		// The client got no HTTP answer: unreachable, timed out, or TLS failed.
		return fmt.Errorf("%s: %w: %w", op, secrets.ErrUnavailable, err)
	}
	msg := responseMessage(re)
	switch {
	case re.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s: %w (%s): the token's policy must grant %s, or the token expired", op, ErrPermissionDenied, msg, need)
	case re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%s: %w: vault answered %d: %s", op, secrets.ErrUnavailable, re.StatusCode, msg)
	case re.StatusCode == http.StatusBadRequest && strings.Contains(msg, "check-and-set"):
		return fmt.Errorf("%s: %w: %s", op, errCASMismatch, msg)
	default:
		return fmt.Errorf("%s: vault answered %d: %s", op, re.StatusCode, msg)
	}
}

// responseMessage is Vault's error text on one line, cut short: a proxy in front of Vault may answer with a
// whole HTML page.
func responseMessage(re *vaultapi.ResponseError) string {
	msg := strings.Join(re.Errors, "; ")
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > 200 {
		msg = strings.ToValidUTF8(msg[:200], "") + "..."
	}
	if msg == "" {
		msg = http.StatusText(re.StatusCode)
	}
	return msg
}
