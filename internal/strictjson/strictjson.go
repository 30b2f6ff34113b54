// Package strictjson decodes JSON that someone else wrote — tokens, agent-channel messages, request bodies,
// mesh frames, tool results, the sandbox's CLI output — exactly, so that no two readers of the same bytes
// can disagree about what they say (docs/PROTOCOL.md#json).
//
// encoding/json matches object member names to struct fields case-insensitively (with Unicode folding:
// "ſub" is "sub") and lets the last of several members with the same name win, so a signed
// {"sub":"alice","Sub":"bob"} decodes as bob while every other JWT library reads alice. This package is
// built on github.com/go-json-experiment/json (the basis of encoding/json/v2) and:
//
//   - matches member names to fields exactly (case-sensitive; a case variant is an unrelated member),
//   - refuses an object that names a member twice, at every depth (raw values kept for later included),
//   - refuses invalid UTF-8 (raw or as an unpaired surrogate escape; AllowInvalidUTF8 reads it as U+FFFD)
//     and data after the value,
//   - ignores unknown members, or refuses them with RejectUnknown,
//
// and reports every refusal as an *Error naming the member by its JSON Pointer. Marshalling stays on
// encoding/json.
package strictjson

import (
	"io"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Option changes how a value is decoded.
type Option uint8

const (
	// RejectUnknown refuses an object member that names no field of the struct it is decoded into
	// (encoding/json's DisallowUnknownFields). A case variant of a field's name is such a member.
	RejectUnknown Option = 1 << iota
	// AllowInvalidUTF8 reads invalid UTF-8 and unpaired surrogate escapes as U+FFFD, as encoding/json did,
	// for output that legitimately holds them: the Claude Code CLI (Node) writes a lone surrogate where it
	// cut a string inside a pair. Names are still exact and duplicates still refused.
	AllowInvalidUTF8
)

// Unmarshal decodes b, which must hold exactly one JSON value (whitespace around it allowed), into v.
func Unmarshal(b []byte, v any, opts ...Option) error {
	return classify(json.Unmarshal(b, v, options(opts)))
}

// Read decodes the one JSON value r holds up to its end into v: data after the value is refused. Bound r
// (http.MaxBytesReader, io.LimitReader) as for any body: Read reads all of it. An error of r itself comes
// back as it is (wrapped), so errors.As finds an *http.MaxBytesError.
func Read(r io.Reader, v any, opts ...Option) error {
	return classify(json.UnmarshalRead(r, v, options(opts)))
}

// Decoder reads a stream of JSON values (json.NewDecoder's loop over Decode), each decoded exactly.
type Decoder struct {
	dec  *jsontext.Decoder
	opts json.Options
}

// NewDecoder reads values from r.
func NewDecoder(r io.Reader, opts ...Option) *Decoder {
	o := options(opts)
	return &Decoder{dec: jsontext.NewDecoder(r, o), opts: o}
}

// Decode decodes the next value of the stream into v; io.EOF when the stream ended cleanly between values.
// After an error other than io.EOF the stream cannot be read further.
func (d *Decoder) Decode(v any) error {
	err := json.UnmarshalDecode(d.dec, v, d.opts)
	if err == io.EOF {
		return io.EOF
	}
	return classify(err)
}

// Valid reports whether b is exactly one JSON value that this package would decode: valid UTF-8, no
// duplicate member names.
func Valid(b []byte) bool {
	return jsontext.Value(b).IsValid()
}

func options(opts []Option) json.Options {
	var all Option
	for _, o := range opts {
		all |= o
	}
	return json.JoinOptions(
		json.DefaultOptionsV2(), // exact names, no duplicates, UTF-8 only; stated again below
		json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(all&AllowInvalidUTF8 != 0),
		json.RejectUnknownMembers(all&RejectUnknown != 0),
	)
}
