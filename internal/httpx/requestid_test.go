package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValidRequestID(t *testing.T) {
	for id, ok := range map[string]bool{
		"abc":                                  true,
		"0f8fad5b-d9cb-469f-a165-70867728950e": true,
		"trace.span:1_A":                       true,
		strings.Repeat("a", MaxRequestIDLen):   true,
		strings.Repeat("a", MaxRequestIDLen+1): false,
		"":                                     false,
		"a b":                                  false,
		"a\nb":                                 false,
		"a/b":                                  false,
		"é":                                    false,
		`a"b`:                                  false,
	} {
		if ValidRequestID(id) != ok {
			t.Errorf("ValidRequestID(%q) = %v", id, !ok)
		}
	}
	if id := NewRequestID(); !ValidRequestID(id) || len(id) != 16 {
		t.Errorf("NewRequestID() = %q", id)
	}
}

func TestRequestIDs(t *testing.T) {
	var seen string
	h := RequestIDs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = RequestID(r.Context()) }))
	for sent, kept := range map[string]bool{"": false, "client-id.1:2": true, "bad id": false, strings.Repeat("x", MaxRequestIDLen+1): false} {
		r := httptest.NewRequest("GET", "/", nil)
		if sent != "" {
			r.Header.Set(HeaderRequestID, sent)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		echoed := w.Header().Get(HeaderRequestID)
		if echoed != seen || !ValidRequestID(seen) || (seen == sent) != kept {
			t.Errorf("sent %q: handler saw %q, echoed %q", sent, seen, echoed)
		}
	}
}
