package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/strictjson"
)

type inner struct {
	Name string   `json:"name"`
	N    int64    `json:"n"`
	F    float64  `json:"f"`
	B    bool     `json:"b"`
	P    *int     `json:"p"`
	List []string `json:"list"`
}

type target struct {
	Iss   string          `json:"iss"`
	Sub   string          `json:"sub"`
	Count int             `json:"count"`
	U     uint8           `json:"u"`
	Inner inner           `json:"inner"`
	Items []inner         `json:"items"`
	Ptr   *inner          `json:"ptr"`
	Map   map[string]int  `json:"map"`
	Raw   json.RawMessage `json:"raw"`
	Any   any             `json:"any"`
}

// fieldNames are every JSON name of target and inner: a member equal to one of them under Unicode case
// folding, but not exactly, is what encoding/json matched and strictjson does not.
var fieldNames = []string{"iss", "sub", "count", "u", "inner", "items", "ptr", "map", "raw", "any", "name", "n", "f", "b", "p", "list"}

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		name, in string
		opt      []strictjson.Option
		want     target
		kind     strictjson.Kind
		pointer  string
	}{
		{name: "exact names", in: `{"sub":"alice","inner":{"name":"x"}}`, want: target{Sub: "alice", Inner: inner{Name: "x"}}},
		{name: "case variant after is another member", in: `{"sub":"alice","Sub":"bob","SUB":"eve","ſub":"mallory"}`, want: target{Sub: "alice"}},
		{name: "case variant alone does not fill the field", in: `{"Sub":"bob"}`, want: target{}},
		{name: "case variant refused with RejectUnknown", in: `{"sub":"alice","Sub":"bob"}`, opt: []strictjson.Option{strictjson.RejectUnknown}, kind: strictjson.Unknown, pointer: "/Sub"},
		{name: "unknown ignored", in: `{"jti":"x","sub":"a"}`, want: target{Sub: "a"}},
		{name: "unknown refused nested", in: `{"inner":{"name":"x","colour":1}}`, opt: []strictjson.Option{strictjson.RejectUnknown}, kind: strictjson.Unknown, pointer: "/inner/colour"},
		{name: "duplicate field", in: `{"sub":"alice","sub":"bob"}`, kind: strictjson.Duplicate, pointer: "/sub"},
		{name: "duplicate nested", in: `{"inner":{"n":1,"n":2}}`, kind: strictjson.Duplicate, pointer: "/inner/n"},
		{name: "duplicate in array element", in: `{"items":[{},{"b":true,"b":false}]}`, kind: strictjson.Duplicate, pointer: "/items/1/b"},
		{name: "duplicate map key", in: `{"map":{"a":1,"a":2}}`, kind: strictjson.Duplicate, pointer: "/map/a"},
		{name: "duplicate inside a raw value", in: `{"raw":{"x":{"y":1,"y":2}}}`, kind: strictjson.Duplicate, pointer: "/raw/x/y"},
		{name: "duplicate inside any", in: `{"any":[{"k":1,"k":1}]}`, kind: strictjson.Duplicate, pointer: "/any/0/k"},
		{name: "duplicate inside an ignored member", in: `{"jti":{"a":1,"a":2}}`, kind: strictjson.Duplicate, pointer: "/jti/a"},
		{name: "duplicate escaped", in: `{"sub":"a","\u0073ub":"b"}`, kind: strictjson.Duplicate, pointer: "/sub"},
		{name: "invalid UTF-8", in: "{\"sub\":\"\xff\"}", kind: strictjson.InvalidUTF8, pointer: "/sub"},
		{name: "unpaired surrogate", in: `{"sub":"\ud800"}`, kind: strictjson.InvalidUTF8, pointer: "/sub"},
		{name: "trailing data", in: `{} {}`, kind: strictjson.Syntax},
		{name: "cut short", in: `{"sub":`, kind: strictjson.Syntax, pointer: "/sub"},
		{name: "wrong type", in: `{"inner":{"n":"1"}}`, kind: strictjson.Value, pointer: "/inner/n"},
		{name: "out of range", in: `{"u":256}`, kind: strictjson.Value, pointer: "/u"},
		{name: "null into a value is zero", in: `{"count":null,"sub":null}`, want: target{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got target
			err := strictjson.Unmarshal([]byte(tt.in), &got, tt.opt...)
			if tt.kind == 0 {
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("Unmarshal = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var je *strictjson.Error
			if !errors.As(err, &je) || je.Kind != tt.kind || je.Pointer != tt.pointer {
				t.Fatalf("Unmarshal error = %#v (%v); want kind %d at %q", je, err, tt.kind, tt.pointer)
			}
			if tt.pointer != "" && !strings.Contains(err.Error(), tt.pointer) {
				t.Fatalf("message %q does not name %s", err, tt.pointer)
			}
		})
	}
}

// upper is a type whose own UnmarshalJSON decodes with strictjson: its errors keep their kind and get the
// whole pointer.
type upper struct{ V string }

func (u *upper) UnmarshalJSON(b []byte) error {
	var p struct {
		V string `json:"v"`
	}
	if err := strictjson.Unmarshal(b, &p, strictjson.RejectUnknown); err != nil {
		return err
	}
	u.V = strings.ToUpper(p.V)
	return nil
}

func TestMethodErrorsKeepTheirPointer(t *testing.T) {
	var v struct {
		U []upper `json:"u"`
	}
	for in, want := range map[string]*strictjson.Error{
		`{"u":[{"v":"a"},{"v":"a","v":"b"}]}`: {Kind: strictjson.Duplicate, Pointer: "/u/1/v"},
		`{"u":[{"V":"a"}]}`:                   {Kind: strictjson.Unknown, Pointer: "/u/0/V"},
		`{"u":[{"v":1}]}`:                     {Kind: strictjson.Value, Pointer: "/u/0/v"},
	} {
		var je *strictjson.Error
		err := strictjson.Unmarshal([]byte(in), &v)
		if !errors.As(err, &je) || je.Kind != want.Kind || je.Pointer != want.Pointer {
			t.Errorf("%s: error %v (%#v), want kind %d at %s", in, err, je, want.Kind, want.Pointer)
		}
	}
	if err := strictjson.Unmarshal([]byte(`{"u":[{"v":"a"}]}`), &v); err != nil || v.U[0].V != "A" {
		t.Fatalf("Unmarshal = %+v, %v", v, err)
	}
}

func TestRead(t *testing.T) {
	var v target
	if err := strictjson.Read(strings.NewReader(" {\"sub\":\"a\"}\n"), &v); err != nil || v.Sub != "a" {
		t.Fatalf("Read = %+v, %v", v, err)
	}
	var je *strictjson.Error
	if err := strictjson.Read(strings.NewReader(`{"sub":"a"} {"sub":"b"}`), &v); !errors.As(err, &je) || je.Kind != strictjson.Syntax {
		t.Fatalf("Read of two values = %v, want a syntax error", err)
	}
	body := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(`{"sub":"`+strings.Repeat("a", 100)+`"}`)), 16)
	var mbe *http.MaxBytesError
	if err := strictjson.Read(body, &v); !errors.As(err, &mbe) {
		t.Fatalf("Read over the bound = %v, want an *http.MaxBytesError in the chain", err)
	}
}

func TestDecoderStream(t *testing.T) {
	d := strictjson.NewDecoder(strings.NewReader("{\"sub\":\"a\"}\n{\"Sub\":\"b\"}\n{\"sub\":\"c\",\"sub\":\"d\"}\n"))
	var got []string
	for {
		var v target
		err := d.Decode(&v)
		if err == io.EOF {
			t.Fatal("the stream ended before the duplicate was refused")
		}
		var je *strictjson.Error
		if errors.As(err, &je) {
			if je.Kind != strictjson.Duplicate || je.Pointer != "/sub" {
				t.Fatalf("error %v", err)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v.Sub)
	}
	if !reflect.DeepEqual(got, []string{"a", ""}) {
		t.Fatalf("values = %q", got)
	}
	d = strictjson.NewDecoder(strings.NewReader(" "))
	if err := d.Decode(new(target)); err != io.EOF {
		t.Fatalf("empty stream = %v, want io.EOF", err)
	}
}

// FuzzAgreesWithEncodingJSON decodes the same bytes with strictjson and with encoding/json (the reference
// every parser used before). strictjson may refuse more, but only for its documented reasons: a duplicate
// name or invalid UTF-8. Otherwise both accept or both refuse, and what both accept decodes to equal
// values. A member whose name matches a field only case-insensitively is the one documented difference in
// meaning (encoding/json fills the field, strictjson does not): such names are renamed in the input both
// decoders get, and TestUnmarshal covers them.
func FuzzAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"iss":"a","sub":"alice","count":3,"u":7,"inner":{"name":"x","n":-1,"f":1.5,"b":true,"p":2,"list":["a"]}}`,
		`{"items":[{"n":1},{}],"ptr":{"list":null},"map":{"k":1},"raw":{"x":[1,{"y":null}]},"any":[1,"s",{"k":true}]}`,
		`{"sub":"alice","Sub":"bob","ſub":"eve","SUB":"x"}`,
		`{"sub":"alice","sub":"bob"}`, `{"jti":{"a":1,"a":2}}`,
		"{\"sub\":\"\xff\"}", `{"sub":"\ud800"}`, `{"sub":"\ud83d\ude00"}`,
		`{"u":256}`, `{"count":1e2}`, `{"count":-0}`, `{"any":1e400}`, `{"raw":  [ 1 , 2 ] }`,
		`{"count":null,"inner":null,"items":[null]}`, `[]`, `null`, `{} x`, ` {"map":{"":0}} `,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, rejectUnknown bool) {
		in = renameFoldedNames(in)
		var opts []strictjson.Option
		if rejectUnknown {
			opts = append(opts, strictjson.RejectUnknown)
		}
		var got, ref target
		err := strictjson.Unmarshal(in, &got, opts...)
		refErr := referenceUnmarshal(in, &ref, rejectUnknown)
		switch {
		case err == nil && refErr == nil:
			if !reflect.DeepEqual(got, ref) {
				t.Fatalf("both accept %q with different meanings:\nstrictjson    %+v\nencoding/json %+v", in, got, ref)
			}
		case err == nil:
			t.Fatalf("strictjson accepts %q, encoding/json refuses it: %v", in, refErr)
		case refErr == nil:
			var je *strictjson.Error
			if !errors.As(err, &je) {
				t.Fatalf("error %T is not a *strictjson.Error", err)
			}
			switch {
			case je.Kind == strictjson.Duplicate && !hasDuplicate(in):
				t.Fatalf("strictjson refuses %q as a duplicate (%v), but no object in it names a member twice", in, err)
			case je.Kind == strictjson.InvalidUTF8 && utf8.Valid(in) && !bytes.Contains(in, []byte(`\u`)):
				t.Fatalf("strictjson refuses %q as invalid UTF-8 (%v), but it is valid and escapes nothing", in, err)
			case je.Kind != strictjson.Duplicate && je.Kind != strictjson.InvalidUTF8:
				t.Fatalf("strictjson refuses %q (%v, kind %d) for a reason not documented; encoding/json accepts it as %+v", in, err, je.Kind, ref)
			}
		}
	})
}

// referenceUnmarshal is encoding/json's decoding of exactly one value.
func referenceUnmarshal(in []byte, v any, rejectUnknown bool) error {
	if !rejectUnknown {
		return json.Unmarshal(in, v)
	}
	if err := json.Unmarshal(in, new(json.RawMessage)); err != nil {
		return err // not one value
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// renameFoldedNames prefixes "~" to every object member name that equals a field name under Unicode case
// folding (encoding/json's matching) but not exactly. Input that is not JSON stays as it is.
func renameFoldedNames(in []byte) []byte {
	var folded bool
	var out bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	// Walk the tokens with encoding/json's own scanner; a document with no folded name is kept byte for
	// byte, so raw values and number forms are exercised as written.
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch d := tok.(type) {
		case json.Delim:
			if d == '{' {
				out.WriteByte('{')
				for first := true; dec.More(); first = false {
					if !first {
						out.WriteByte(',')
					}
					k, err := dec.Token()
					if err != nil {
						return false
					}
					name := k.(string)
					if isFolded(name) {
						name, folded = "~"+name, true
					}
					b, _ := json.Marshal(name)
					out.Write(b)
					out.WriteByte(':')
					if !walk() {
						return false
					}
				}
				out.WriteByte('}')
				_, err := dec.Token()
				return err == nil
			}
			out.WriteByte('[')
			for first := true; dec.More(); first = false {
				if !first {
					out.WriteByte(',')
				}
				if !walk() {
					return false
				}
			}
			out.WriteByte(']')
			_, err := dec.Token()
			return err == nil
		default:
			b, err := json.Marshal(d)
			out.Write(b)
			return err == nil
		}
	}
	if !walk() || !folded {
		return in
	}
	if _, err := dec.Token(); err != io.EOF {
		return in // trailing data: leave it to the decoders
	}
	return out.Bytes()
}

// hasDuplicate reports whether an object of in, at any depth, names a member twice (as encoding/json's
// scanner reads the names).
func hasDuplicate(in []byte) bool {
	type open struct {
		names map[string]bool // nil for an array
		atKey bool            // the next token of this object is a member name
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	var stack []*open
	valueDone := func() { // a value ended: its object, if any, expects a name next
		if n := len(stack); n > 0 && stack[n-1].names != nil {
			stack[n-1].atKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		top := (*open)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch d := tok.(type) {
		case json.Delim:
			switch d {
			case '{':
				stack = append(stack, &open{names: map[string]bool{}, atKey: true})
			case '[':
				stack = append(stack, &open{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if top != nil && top.names != nil && top.atKey {
				if top.names[d] {
					return true
				}
				top.names[d], top.atKey = true, false
				continue
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

func isFolded(name string) bool {
	for _, f := range fieldNames {
		if name != f && strings.EqualFold(name, f) {
			return true
		}
	}
	return false
}

func TestAllowInvalidUTF8(t *testing.T) {
	var v target
	in := []byte("{\"sub\":\"a\\ud83d\",\"iss\":\"\xff\"}")
	if err := strictjson.Unmarshal(in, &v, strictjson.AllowInvalidUTF8); err != nil || v.Sub != "a\uFFFD" || v.Iss != "\uFFFD" {
		t.Fatalf("Unmarshal = %+v, %v", v, err)
	}
	var je *strictjson.Error
	if err := strictjson.Unmarshal([]byte(`{"sub":"\ud83d","sub":"b"}`), &v, strictjson.AllowInvalidUTF8); !errors.As(err, &je) || je.Kind != strictjson.Duplicate {
		t.Fatalf("duplicate with AllowInvalidUTF8 = %v", err)
	}
}

// TestValueErrorsSpeakJSON: a value of the wrong type is named in JSON's words, never by its Go type (the
// message goes to the client that wrote the JSON: "cannot unmarshal number into Go struct field
// ExecRequest.command" told it nothing it could act on).
func TestValueErrorsSpeakJSON(t *testing.T) {
	type inner struct{ A int }
	type req struct {
		Command string         `json:"command"`
		Args    []string       `json:"args"`
		In      *inner         `json:"in"`
		M       map[string]int `json:"m"`
		B       bool           `json:"b"`
		U       uint8          `json:"u"`
		F       float64        `json:"f"`
		Raw     []byte         `json:"raw"`
	}
	for in, want := range map[string]string{
		`{"command":5}`:      "wrong type at /command: want a string, got a number",
		`{"args":"x"}`:       "wrong type at /args: want an array, got a string",
		`{"args":[1]}`:       "wrong type at /args/0: want a string, got a number",
		`{"in":[]}`:          "wrong type at /in: want an object, got an array",
		`{"in":{"A":"x"}}`:   "wrong type at /in/A: want an integer, got a string",
		`{"in":{"A":1.5}}`:   "invalid value at /in/A: want an integer",
		`{"m":3}`:            "wrong type at /m: want an object, got a number",
		`{"b":"x"}`:          "wrong type at /b: want true or false, got a string",
		`{"f":{}}`:           "wrong type at /f: want a number, got an object",
		`{"raw":1}`:          "wrong type at /raw: want a base64 string, got a number",
		`{"u":300}`:          "number out of range at /u: want a non-negative integer",
		`{"u":-1}`:           "invalid value at /u: want a non-negative integer",
		`5`:                  "wrong type at the top level: want an object, got a number",
		`{"command":[true]}`: "wrong type at /command: want a string, got an array",
	} {
		var r req
		err := strictjson.Unmarshal([]byte(in), &r)
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
