// Package wire holds Warren's wire protocol (docs/PROTOCOL.md): the error shape and its codes, the agent
// channel envelopes, and the mapping from error codes to HTTP statuses and WebSocket close codes. Every role
// and the SDK speak through these types so a code means the same thing everywhere.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/warren-mesh/warren/internal/strictjson"
)

// Code is one of the error codes of docs/PROTOCOL.md#errors.
type Code string

// The error codes of docs/PROTOCOL.md#errors.
const (
	InvalidArgument  Code = "invalid_argument"
	Unauthenticated  Code = "unauthenticated"
	PermissionDenied Code = "permission_denied"
	NotFound         Code = "not_found"
	Conflict         Code = "conflict"
	PayloadTooLarge  Code = "payload_too_large"
	BudgetExceeded   Code = "budget_exceeded"
	RateLimited      Code = "rate_limited"
	ConcurrencyLimit Code = "concurrency_limit"
	// ResourceExhausted: a hard limit of the sandbox (Grant.Limits) would be exceeded, e.g. the bytes its
	// snapshots keep in the store; nothing was changed. Retrying does not help until usage goes down.
	ResourceExhausted Code = "resource_exhausted"
	Unavailable       Code = "unavailable"
	Timeout           Code = "timeout"
	Internal          Code = "internal"
)

var codeTable = map[Code]struct{ http, close int }{
	InvalidArgument:   {http.StatusBadRequest, 4400},
	Unauthenticated:   {http.StatusUnauthorized, 4401},
	PermissionDenied:  {http.StatusForbidden, 4403},
	NotFound:          {http.StatusNotFound, 4404},
	Conflict:          {http.StatusConflict, 4409},
	PayloadTooLarge:   {http.StatusRequestEntityTooLarge, 1009},
	BudgetExceeded:    {http.StatusPaymentRequired, 4402},
	RateLimited:       {http.StatusTooManyRequests, 4429},
	ConcurrencyLimit:  {http.StatusTooManyRequests, 4430},
	ResourceExhausted: {http.StatusTooManyRequests, 4431},
	Unavailable:       {http.StatusServiceUnavailable, 1013},
	Timeout:           {http.StatusGatewayTimeout, 4504},
	Internal:          {http.StatusInternalServerError, 1011},
}

// Valid reports whether c is one of the codes above.
func (c Code) Valid() bool { _, ok := codeTable[c]; return ok }

// HTTPStatus is the HTTP status for c; unknown codes map to 500.
func (c Code) HTTPStatus() int {
	if e, ok := codeTable[c]; ok {
		return e.http
	}
	return http.StatusInternalServerError
}

// CloseCode is the WebSocket close code for c; unknown codes map to 1011.
func (c Code) CloseCode() int {
	if e, ok := codeTable[c]; ok {
		return e.close
	}
	return 1011
}

// CodeForHTTPStatus is the inverse of HTTPStatus for clients that only see a status (429 maps to rate_limited).
func CodeForHTTPStatus(status int) Code {
	for c, e := range codeTable {
		if e.http == status && c != ConcurrencyLimit && c != ResourceExhausted {
			return c
		}
	}
	if status >= 500 {
		return Internal
	}
	return InvalidArgument
}

// CodeForCloseCode is the inverse of CloseCode; 0 when the close code is not one of ours.
func CodeForCloseCode(close int) Code {
	for c, e := range codeTable {
		if e.close == close {
			return c
		}
	}
	return ""
}

// Error is the one error shape of docs/PROTOCOL.md#errors. It is both a Go error and the JSON body on the
// wire.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
	// cause is logged, never sent.
	cause error
}

// Errorf builds an Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap builds an Error whose cause is kept for logs and errors.Is/As but never serialised.
func Wrap(code Code, cause error, message string) *Error {
	return &Error{Code: code, Message: message, cause: cause}
}

// WithDetails returns a copy of e carrying details.
func (e *Error) WithDetails(d map[string]any) *Error {
	c := *e
	c.Details = d
	return &c
}

func (e *Error) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.cause }

// Is makes errors.Is(err, &wire.Error{Code: c}) match any Error with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// CodeOf returns the code of the first *Error in err's chain, or Internal.
func CodeOf(err error) Code {
	var we *Error
	if errors.As(err, &we) && we.Code.Valid() {
		return we.Code
	}
	return Internal
}

// Public turns any error into what may be sent to a client: an *Error keeps its code, message and details;
// anything else, and any internal error, becomes a bare "internal error" so no cause leaks. The bool reports
// whether the cause must be logged (it was not a deliberate client-facing error).
func Public(err error) (*Error, bool) {
	var we *Error
	if errors.As(err, &we) && we.Code.Valid() && we.Code != Internal {
		return &Error{Code: we.Code, Message: we.Message, Details: we.Details}, false
	}
	return &Error{Code: Internal, Message: "internal error"}, true
}

// MarshalJSON keeps the cause out of the JSON form (it is unexported anyway; this documents the contract).
func (e *Error) MarshalJSON() ([]byte, error) {
	type plain struct {
		Code    Code           `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details,omitempty"`
	}
	return json.Marshal(plain{e.Code, e.Message, e.Details})
}

// MaxCloseReason is the most a WebSocket close reason may hold (125 bytes of control frame payload minus
// the 2-byte code).
const MaxCloseReason = 123

// CloseReason is the reason of a WebSocket close that ends a connection with e (docs/PROTOCOL.md#errors):
// the JSON {"code","message"} (the message as the channel sends it, ChannelMessage) when it fits
// MaxCloseReason bytes, else with the message cut to its code's phrase, else the code alone. Details are
// left out; the error message sent before the close carries them.
func CloseReason(e *Error) string {
	for _, m := range []string{ChannelMessage(e.Code, e.Message), ChannelMessage(e.Code, "")} {
		if b, _ := json.Marshal(&Error{Code: e.Code, Message: m}); m != "" && len(b) <= MaxCloseReason {
			return string(b)
		}
	}
	return string(e.Code)
}

// JSONError is the invalid_argument error of a refused JSON value (what names it, say "lease body"):
// a *strictjson.Error keeps its message, which names the member by its JSON Pointer, and the pointer goes
// to details.field (docs/PROTOCOL.md#json); an *Error returned by a type's own decoding is returned as it
// is. The cause is kept for logs.
func JSONError(err error, what string) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	var je *strictjson.Error
	if errors.As(err, &je) {
		e := Wrap(InvalidArgument, err, what+": "+je.Error())
		if je.Pointer != "" {
			e.Details = map[string]any{"field": clip(je.Pointer)}
		}
		return e
	}
	return Wrap(InvalidArgument, err, what+": "+trimJSONErr(err))
}
