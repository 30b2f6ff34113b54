package wire

import "strings"

// channelPhrase is the phrase every agent channel error message (an error message's payload and a close
// reason) starts with, per code: the words the Chucky Cloud TypeScript SDK's client classifies an error
// message by (its createError without a code falls back to parseErrorCode, which matches the message
// against an ordered list of patterns: budget.*exceed, concurrency.*limit, rate.*limit,
// auth|unauthorized|forbidden, timeout, connect|disconnect|websocket, session, tool, invalid|validation;
// src/utils/errors.ts of Chucky-Cloud/chucky-sdk-typescript), so an application written for that client
// gets BudgetExceededError, ConcurrencyLimitError, RateLimitError, AuthenticationError, TimeoutError,
// ConnectionError, SessionError or ValidationError as the code means (docs/PROTOCOL.md#errors). The code
// itself, Warren's, does not change. internal stays "internal error" (the client's generic error).
var channelPhrase = map[Code]string{
	BudgetExceeded:    "budget exceeded",
	ConcurrencyLimit:  "concurrency limit reached",
	RateLimited:       "rate limit reached",
	Unauthenticated:   "authentication failed",
	PermissionDenied:  "forbidden",
	Timeout:           "timeout",
	Unavailable:       "connection unavailable",
	NotFound:          "session not found",
	Conflict:          "session conflict",
	InvalidArgument:   "invalid request",
	PayloadTooLarge:   "invalid request",
	ResourceExhausted: "sandbox limit reached",
}

// ChannelMessage is message as an agent channel error carries it: prefixed with its code's phrase (see
// channelPhrase), once.
func ChannelMessage(code Code, message string) string {
	p, ok := channelPhrase[code]
	if !ok || strings.HasPrefix(strings.ToLower(message), p) {
		return message
	}
	if message == "" {
		return p
	}
	return p + ": " + message
}

// channelError is e as the agent channel sends it: its message prefixed (ChannelMessage).
func channelError(e *Error) *Error {
	return &Error{Code: e.Code, Message: ChannelMessage(e.Code, e.Message), Details: e.Details}
}

// BareMessage is an agent channel error's message without its code's phrase (ChannelMessage's inverse),
// for a client that says what the code means in its own words.
func BareMessage(code Code, message string) string {
	p, ok := channelPhrase[code]
	if ok && len(message) > len(p)+2 && strings.EqualFold(message[:len(p)], p) && message[len(p):len(p)+2] == ": " {
		return message[len(p)+2:]
	}
	return message
}
