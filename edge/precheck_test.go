package edge

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

func precheckReq(method, path, ctype, body string) *http.Request {
	r := httptest.NewRequest(method, "http://edge"+path, strings.NewReader(body))
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	return r
}

// precheck refuses malformed exec and JSON bodies with invalid_argument (the exec field named) and leaves
// everything else, and the body, as it was.
func TestPrecheck(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, ctype, body string
		refused                         bool
		field                           string
	}{
		{"exec ok", "POST", "/v1/sandbox/exec", "application/json", `{"command":"true","future":1}`, false, ""},
		{"exec without content type", "POST", "/v1/sandbox/exec", "", `{"command":"true"}`, false, ""},
		{"exec not declared json is the runner's to judge", "POST", "/v1/sandbox/exec", "", `hello`, false, ""},
		{"exec not json", "POST", "/v1/sandbox/exec", "application/json", `{"command":`, true, ""},
		{"exec wrong type", "POST", "/v1/sandbox/exec", "application/json", `{"command":5}`, true, "/command"},
		{"exec twice the same field", "POST", "/v1/sandbox/exec", "application/json", `{"command":"a","command":"b"}`, true, ""},
		{"json body ok", "POST", "/v1/sandbox/git/clone", "application/json; charset=utf-8", `{"url":"x"}`, false, ""},
		{"json body broken", "POST", "/v1/sandbox/git/clone", "application/json", `{"url":"x"} trailing`, true, ""},
		{"a file upload is not json", "PUT", "/v1/sandbox/files?path=a", "application/octet-stream", `{not json`, false, ""},
		{"no body", "GET", "/v1/sandbox/files/list?path=.", "", ``, false, ""},
	} {
		r := precheckReq(tc.method, tc.path, tc.ctype, tc.body)
		err := precheck(r)
		var we *wire.Error
		if tc.refused != (err != nil) || err != nil && (!errors.As(err, &we) || we.Code != wire.InvalidArgument) {
			t.Errorf("%s: %v, want refused %v with invalid_argument", tc.name, err, tc.refused)
			continue
		}
		if tc.field != "" && (we == nil || we.Details["field"] != tc.field) {
			t.Errorf("%s: %v, want the field %s named", tc.name, we, tc.field)
		}
		if got, _ := io.ReadAll(r.Body); string(got) != tc.body {
			t.Errorf("%s: body after the check %q, want %q", tc.name, got, tc.body)
		}
	}
	// Chunked or larger than precheckMax: not read, left to the runner.
	big := precheckReq("POST", "/v1/sandbox/exec", "application/json", "{"+strings.Repeat(" ", precheckMax)+"}")
	if err := precheck(big); err != nil {
		t.Fatalf("a body over precheckMax: %v, want it left to the runner", err)
	}
	chunked := precheckReq("POST", "/v1/sandbox/exec", "application/json", "{")
	chunked.ContentLength = -1
	if err := precheck(chunked); err != nil {
		t.Fatalf("a chunked body: %v, want it left to the runner", err)
	}
}

// FuzzPrecheck: any body is accepted or refused with a typed invalid_argument, and the body forwarded
// afterwards is exactly the one sent.
func FuzzPrecheck(f *testing.F) {
	for _, s := range []string{`{"command":"true"}`, `{"command":5}`, `[]`, `{"a":1}{"b":2}`, "\xff", `{"args":["a",1]}`, ``} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, exec bool) {
		path := "/v1/sandbox/git/clone"
		if exec {
			path = "/v1/sandbox/exec"
		}
		r := httptest.NewRequest("POST", "http://edge"+path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if err := precheck(r); err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.InvalidArgument {
				t.Fatalf("untyped refusal %v", err)
			}
		}
		if got, _ := io.ReadAll(r.Body); !bytes.Equal(got, body) {
			t.Fatalf("body %q forwarded as %q", body, got)
		}
	})
}
