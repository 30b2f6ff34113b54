package modelproxy

import (
	"encoding/json"
	"net/http"
)

// apiError is an answer the proxy gives itself, in the Messages API's error shape
// ({"type":"error","error":{"type","message"}}) so that the CLI reports it like any API error.
type apiError struct {
	status  int
	typ     string
	message string
}

// The proxy's own answers. Which of them the Claude Code CLI retries decides how they are used:
//
//   - 402 billing_error is not retried: the CLI sends the request once and ends the turn with
//     "API Error: 402 <message>" (measured with the pinned CLI; see README.md). Budget refusals use it, and
//     so do ledger outages: a retried status (5xx, 529, 429) would have the CLI hammer a ledger that is
//     down, ten times per call, and a 400 makes the CLI resend up to five variants of the request with
//     beta features stripped.
//   - 401 is retried with backoff (the CLI thinks its key helper went stale): fine for a wrong token,
//     which only a broken or hostile agent sends, and which never reaches the upstream.
//   - 502 and 503 api_error are retried: right for an upstream that could not be reached, and for a proxy
//     shutting down (its runner is going away with the agent).
var (
	errUnauthenticated = apiError{http.StatusUnauthorized, "authentication_error", "Warren: invalid or missing session token"}
	errBudgetExhausted = apiError{http.StatusPaymentRequired, "billing_error", "Warren: the AI budget for this window is exhausted"}
	errMeteringDown    = apiError{http.StatusPaymentRequired, "billing_error", "Warren: usage metering is unavailable; the model cannot be called until it is back"}
	errTooLarge        = apiError{http.StatusRequestEntityTooLarge, "request_too_large", "Warren: the request body exceeds 32 MiB"}
	errNotFound        = apiError{http.StatusNotFound, "not_found_error", "Warren: the model proxy serves /v1/messages and /v1/messages/count_tokens only"}
	errUpstream        = apiError{http.StatusBadGateway, "api_error", "Warren: the model API could not be reached"}
	errShuttingDown    = apiError{http.StatusServiceUnavailable, "api_error", "Warren: the model proxy is shutting down"}
	errNoTurn          = apiError{http.StatusForbidden, "permission_error", "Warren: no turn of this session is running; the model is called only during a turn"}
	errCountTooLarge   = apiError{http.StatusRequestEntityTooLarge, "request_too_large", "Warren: a count_tokens body may not exceed 2 MiB"}
)

func badRequest(msg string) apiError {
	return apiError{http.StatusBadRequest, "invalid_request_error", "Warren: " + msg}
}

func writeAPIError(w http.ResponseWriter, e apiError) {
	type detail struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error detail `json:"error"`
	}{"error", detail{e.typ, e.message}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.status == http.StatusPaymentRequired {
		// The CLI does not retry a 402 anyway; the Anthropic SDKs also honour this header.
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}
