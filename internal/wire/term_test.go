package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseTermControl(t *testing.T) {
	for _, c := range []struct {
		in   string
		code Code // "" = accepted
	}{
		{`{"type":"resize","cols":80,"rows":24}`, ""},
		{` {"type":"resize","cols":1000,"rows":1} `, ""},
		{`{"type":"exit","code":0}`, ""},
		{`{"type":"exit","code":-1}`, ""},
		{`{"type":"resize","cols":0,"rows":24}`, InvalidArgument},
		{`{"type":"resize","cols":80,"rows":1001}`, InvalidArgument},
		{`{"type":"resize","cols":-5,"rows":-5}`, InvalidArgument},
		{`{"type":"resize","cols":80,"rows":24,"code":1}`, InvalidArgument},
		{`{"type":"exit"}`, InvalidArgument},
		{`{"type":"exit","code":1,"cols":3}`, InvalidArgument},
		{`{"type":"signal"}`, InvalidArgument},
		{`{"type":"resize","cols":80,"rows":24,"extra":1}`, InvalidArgument},
		{`{"type":"resize","cols":80,"rows":24}{}`, InvalidArgument},
		{`{"type":"resize","cols":1e400,"rows":24}`, InvalidArgument},
		{`not json`, InvalidArgument},
		{``, InvalidArgument},
		{`{"type":"` + strings.Repeat("x", MaxTermControl) + `"}`, PayloadTooLarge},
	} {
		_, err := ParseTermControl([]byte(c.in))
		if got := CodeOf(err); (err == nil) != (c.code == "") || (err != nil && got != c.code) {
			t.Errorf("ParseTermControl(%.60q) = %v, want code %q", c.in, err, c.code)
		}
	}
}

func TestDecodeTermCreate(t *testing.T) {
	r, err := DecodeTermCreate(strings.NewReader(`{}`))
	if err != nil || r.Cols != 80 || r.Rows != 24 || r.Command != "" {
		t.Fatalf("default = %+v, %v", r, err)
	}
	for _, bad := range []string{
		`{"cols":80}`, `{"cols":2000,"rows":10}`, `{"args":["x"]}`, `{"unknown":1}`,
		`{"command":"` + strings.Repeat("x", MaxProcCommand+1) + `"}`,
	} {
		if _, err := DecodeTermCreate(strings.NewReader(bad)); CodeOf(err) != InvalidArgument {
			t.Errorf("DecodeTermCreate(%.60q) = %v, want invalid_argument", bad, err)
		}
	}
}

// FuzzParseTermControl: any bytes give a checked message or a typed error, never a panic; what is
// accepted is within bounds and survives a round trip.
func FuzzParseTermControl(f *testing.F) {
	for _, s := range []string{
		`{"type":"resize","cols":80,"rows":24}`, `{"type":"exit","code":3}`, `{"type":"resize"}`, `{}`, `[]`,
		`{"type":"resize","cols":80,"rows":24,"cols":0}`, "\x00", `{"type":"exit","code":9999999999999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseTermControl(b)
		if err != nil {
			if code := CodeOf(err); code != InvalidArgument && code != PayloadTooLarge {
				t.Fatalf("code %q for %q", code, b)
			}
			return
		}
		switch c.Type {
		case TermResize:
			if CheckTermSize(c.Cols, c.Rows) != nil {
				t.Fatalf("accepted size %dx%d", c.Cols, c.Rows)
			}
		case TermExit:
			if c.Code == nil {
				t.Fatal("exit without code")
			}
		default:
			t.Fatalf("accepted type %q", c.Type)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseTermControl(again); err != nil {
			t.Fatalf("round trip of %s: %v", again, err)
		}
	})
}
