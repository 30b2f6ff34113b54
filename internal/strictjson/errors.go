package strictjson

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Kind says why a value was refused.
type Kind uint8

const (
	// Syntax: not JSON, cut short, or data after the value.
	Syntax Kind = iota + 1
	// Duplicate: an object names the member at Pointer a second time.
	Duplicate
	// Unknown: the member at Pointer names no field (RejectUnknown only).
	Unknown
	// InvalidUTF8: a string holds invalid UTF-8 or an unpaired surrogate escape.
	InvalidUTF8
	// Value: the value at Pointer has the wrong type, is out of range, or its type refused it.
	Value
	// ReadFailed: the reader failed (a body over its bound, a closed connection); the cause is wrapped.
	ReadFailed
)

// Error is a refused JSON value. Its message names the member by its JSON Pointer (RFC 6901, clipped) and
// holds nothing else from the input, so it may be sent to the client that wrote it.
type Error struct {
	Kind Kind
	// Pointer locates the member or value: "" is the whole value, "/budget/ai" a nested member.
	Pointer string
	err     error
}

func (e *Error) Error() string {
	where := "at " + clip(e.Pointer)
	if e.Pointer == "" {
		where = "at the top level"
	}
	switch e.Kind {
	case Duplicate:
		return "duplicate member " + clip(e.Pointer)
	case Unknown:
		return "unknown member " + clip(e.Pointer)
	case InvalidUTF8:
		return "invalid UTF-8 " + where
	case Syntax:
		if errors.Is(e.err, io.ErrUnexpectedEOF) {
			return "JSON cut short " + where
		}
		return "invalid JSON " + where
	case Value:
		return e.valueMessage(where)
	}
	return "reading JSON: " + e.err.Error()
}

func (e *Error) valueMessage(where string) string {
	var se *json.SemanticError
	if !errors.As(e.err, &se) {
		return "invalid value " + where
	}
	switch {
	case errors.Is(se.Err, strconv.ErrRange):
		return fmt.Sprintf("number out of range %s: want %s", where, wantOf(se.GoType))
	case errors.Is(se.Err, strconv.ErrSyntax):
		return fmt.Sprintf("invalid value %s: want %s", where, wantOf(se.GoType))
	case se.Err != nil && !isJSONError(se.Err):
		// The type's own refusal (an UnmarshalJSON method): its text is the type's, not the input's.
		return fmt.Sprintf("invalid value %s: %s", where, clip(se.Err.Error()))
	case se.GoType != nil && se.JSONKind != 0 && wantOf(se.GoType) != jsonKindName(se.JSONKind):
		return fmt.Sprintf("wrong type %s: want %s, got %s", where, wantOf(se.GoType), jsonKindName(se.JSONKind))
	case se.GoType != nil:
		return fmt.Sprintf("invalid value %s: want %s", where, wantOf(se.GoType))
	}
	return "invalid value " + where
}

// wantOf names what a Go type reads, in JSON's words (never the Go type's name: messages go to clients
// who wrote JSON, not Go).
func wantOf(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a valid value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a valid value"
}

// jsonKindName names the kind of a JSON value as a client would.
func jsonKindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a value"
}

func (e *Error) Unwrap() error { return e.err }

// isJSONError: err is the decoder's own, not a method's.
func isJSONError(err error) bool {
	var se *json.SemanticError
	var sy *jsontext.SyntacticError
	return errors.As(err, &se) || errors.As(err, &sy) || errors.Is(err, json.ErrUnknownName)
}

// classify turns the decoder's error into an *Error (nil stays nil).
func classify(err error) error {
	if err == nil {
		return nil
	}
	e := &Error{Kind: ReadFailed, err: err}
	var sy *jsontext.SyntacticError
	var se *json.SemanticError
	switch {
	case errors.As(err, &sy):
		e.Pointer = string(sy.JSONPointer)
		switch {
		case errors.Is(sy.Err, jsontext.ErrDuplicateName):
			e.Kind = Duplicate
		case sy.Err != nil && (strings.Contains(sy.Err.Error(), "invalid UTF-8") ||
			strings.Contains(sy.Err.Error(), "surrogate pair")):
			e.Kind = InvalidUTF8
		default:
			e.Kind = Syntax
		}
	case errors.As(err, &se):
		e.Pointer = string(se.JSONPointer)
		var inner *Error
		switch {
		case errors.As(se.Err, &inner):
			// A type's UnmarshalJSON decoded its value with this package: keep its kind and cause, with the
			// whole pointer.
			e.Kind, e.Pointer, e.err = inner.Kind, e.Pointer+inner.Pointer, inner.err
		case errors.Is(se.Err, json.ErrUnknownName):
			e.Kind = Unknown
		default:
			e.Kind = Value
		}
	case errors.Is(err, io.ErrUnexpectedEOF):
		e.Kind = Syntax
	}
	return e
}

// clip bounds a pointer taken from the input for messages.
func clip(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return strings.ToValidUTF8(s, "") + "…"
}
