package warren

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// Error is the one error shape of the protocol: {code, message, details}. Every error the SDK returns that
// came from the platform (an HTTP error body, an error message on the agent channel, a WebSocket close) is
// an *Error, possibly wrapped; use IsCode or errors.As to inspect it.
type Error = wire.Error

// Code is an error code of the protocol.
type Code = wire.Code

// The error codes of the protocol.
const (
	CodeInvalidArgument   = wire.InvalidArgument
	CodeUnauthenticated   = wire.Unauthenticated
	CodePermissionDenied  = wire.PermissionDenied
	CodeNotFound          = wire.NotFound
	CodeConflict          = wire.Conflict
	CodePayloadTooLarge   = wire.PayloadTooLarge
	CodeBudgetExceeded    = wire.BudgetExceeded
	CodeRateLimited       = wire.RateLimited
	CodeConcurrencyLimit  = wire.ConcurrencyLimit
	CodeResourceExhausted = wire.ResourceExhausted
	CodeUnavailable       = wire.Unavailable
	CodeTimeout           = wire.Timeout
	CodeInternal          = wire.Internal
)

// ErrClosed is returned by the methods of a Session after it has ended normally or was closed.
var ErrClosed = errors.New("warren: session closed")

// errSSETooLarge ends a streamed exec whose server sent an event larger than maxSSEEvent.
var errSSETooLarge = errors.New("warren: server-sent event exceeds the size limit")

// IsCode reports whether err is, or wraps, an *Error with the given code.
func IsCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// closeError turns the close status and reason of a WebSocket into an *Error. The server closes with the
// close code of the error and a reason that is the error as JSON when it fits a close frame, else the code
// or a plain message. prev, when not nil, is the error message the server sent just before closing; it
// carries the full message when the reason had to be shortened. A normal closure is not an error: nil.
func closeError(status int, reason string, prev *Error) *Error {
	if status == int(websocket.StatusNormalClosure) {
		return nil
	}
	if r := strings.TrimSpace(reason); strings.HasPrefix(r, "{") {
		var e Error
		if json.Unmarshal([]byte(r), &e) == nil && e.Code.Valid() {
			return &e
		}
	}
	code := wire.CodeForCloseCode(status)
	if c := Code(reason); c.Valid() {
		// The reason is the bare code: the JSON form did not fit the close frame.
		code, reason = c, ""
	}
	if code == "" {
		switch websocket.StatusCode(status) {
		case websocket.StatusGoingAway, websocket.StatusServiceRestart, websocket.StatusTryAgainLater,
			websocket.StatusBadGateway:
			code = wire.Unavailable
		case websocket.StatusMessageTooBig:
			code = wire.PayloadTooLarge
		default:
			code = wire.Internal
		}
	}
	if reason == "" && prev != nil && prev.Code == code {
		return prev
	}
	if reason == "" {
		reason = fmt.Sprintf("connection closed with status %d", status)
	}
	return &Error{Code: code, Message: reason}
}
