package adminclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

var (
	// ErrBadURL is New's error for a base URL that is not http(s)://host[:port][/prefix].
	ErrBadURL = errors.New("bad billing API URL")
	// ErrNoKey is New's error for a missing admin key.
	ErrNoKey = errors.New("no admin key")
)

// Error is a failed call: the request, the id it was sent (and, when the server answered, logged) under,
// and why. Err is the API's *wire.Error when it answered with an error status; else a transport,
// *TimeoutError, *AnswerTooLargeError or decoding error.
type Error struct {
	Method, Path string
	RequestID    string
	Status       int // the answer's HTTP status; 0 when none came
	Err          error
}

func (e *Error) Error() string {
	var s string
	if we, ok := e.Err.(*wire.Error); ok {
		s = fmt.Sprintf("%s %s: %s (%s)", e.Method, e.Path, we.Message, we.Code)
	} else {
		s = fmt.Sprintf("%s %s: %v", e.Method, e.Path, e.Err)
	}
	return s + ", request id " + e.RequestID
}

func (e *Error) Unwrap() error { return e.Err }

// with is a copy of e failed by err; a context ended by the client's own timeout says so.
func (e *Error) with(ctx context.Context, err error) *Error {
	var te *TimeoutError
	if cause := context.Cause(ctx); errors.As(cause, &te) && !errors.As(err, &te) {
		err = fmt.Errorf("%w: %v", te, err)
	}
	out := *e
	out.Err = err
	return &out
}

// TimeoutError is a call that had no (complete) answer within the client's timeout. It matches
// context.DeadlineExceeded.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("no answer within %s", e.After) }

func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// AnswerTooLargeError is an answer over Config.MaxAnswerBytes; it is not read further.
type AnswerTooLargeError struct{ Limit int64 }

func (e *AnswerTooLargeError) Error() string { return fmt.Sprintf("answer over %d bytes", e.Limit) }

// Code is the API's error code of err (an *Error of this package, or any error wrapping a *wire.Error),
// or "" when the API did not answer with one.
func Code(err error) wire.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return ""
}

// IsCode reports whether err is the API's error answer with code c.
func IsCode(err error, c wire.Code) bool { return Code(err) == c }
