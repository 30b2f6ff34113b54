package httpx

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// serve answers r through h and decodes a wire error body (nil when the answer is 2xx).
func serve(t testing.TB, h http.Handler, method, path string) (*httptest.ResponseRecorder, *wire.Error) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	if w.Code < 300 {
		return w, nil
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: %d with Content-Type %q: %s", method, path, w.Code, ct, w.Body)
	}
	var e wire.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || !e.Code.Valid() || e.Message == "" {
		t.Fatalf("%s %s: %d, body %q is not a wire error", method, path, w.Code, w.Body)
	}
	return w, &e
}

func TestMuxAnswersWireErrors(t *testing.T) {
	m := &Mux{What: "test API"}
	m.HandleFunc("GET /v1/things/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.PathValue("id")) })
	m.HandleFunc("PUT /v1/things/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "root") })

	if w, _ := serve(t, m, "GET", "/v1/things/42"); w.Body.String() != "42" {
		t.Fatalf("matched route: %q", w.Body)
	}
	if w, _ := serve(t, m, "GET", "/"); w.Body.String() != "root" {
		t.Fatalf("root: %q", w.Body)
	}
	for _, path := range []string{"/nope", "/v1/nope", "/v1/things", "/v1/things/42/more"} {
		w, e := serve(t, m, "GET", path)
		if w.Code != http.StatusNotFound || e.Code != wire.NotFound || !strings.Contains(e.Message, "test API has no route GET "+path) {
			t.Errorf("GET %s: %d %+v", path, w.Code, e)
		}
	}
	w, e := serve(t, m, "DELETE", "/v1/things/42")
	if w.Code != http.StatusBadRequest || e.Code != wire.InvalidArgument || w.Header().Get("Allow") != "GET, HEAD, PUT" ||
		e.Message != "method DELETE is not allowed on /v1/things/42: use GET or HEAD or PUT" {
		t.Fatalf("DELETE: %d %q %+v", w.Code, w.Header().Get("Allow"), e)
	}
	if allow, _ := e.Details["allow"].([]any); len(allow) != 3 {
		t.Fatalf("details.allow = %v", e.Details["allow"])
	}
	if w, e := serve(t, m, "POST", "/"); w.Code != http.StatusBadRequest || e.Code != wire.InvalidArgument {
		t.Fatalf("POST /: %d %+v", w.Code, e)
	}
	// A long path is clipped in the message.
	if _, e := serve(t, m, "GET", "/"+strings.Repeat("x", 5000)); len(e.Message) > 300 {
		t.Fatalf("message of %d bytes", len(e.Message))
	}
}

// With Authorize, a caller it refuses learns nothing of what exists: unknown paths and wrong methods get
// its error; routes are served as they are (they authorize themselves).
func TestMuxAuthorize(t *testing.T) {
	m := &Mux{Authorize: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer k" {
			return wire.Errorf(wire.Unauthenticated, "no key")
		}
		return nil
	}}
	m.HandleFunc("GET /open", func(w http.ResponseWriter, r *http.Request) {})
	for _, c := range []struct{ method, path string }{{"GET", "/nope"}, {"POST", "/open"}} {
		if w, e := serve(t, m, c.method, c.path); w.Code != http.StatusUnauthorized || e.Code != wire.Unauthenticated {
			t.Errorf("%s %s without the key: %d %+v", c.method, c.path, w.Code, e)
		}
	}
	if w, _ := serve(t, m, "GET", "/open"); w.Code != http.StatusOK {
		t.Errorf("route: %d", w.Code)
	}
	r := httptest.NewRequest("GET", "/nope", nil)
	r.Header.Set("Authorization", "Bearer k")
	w := httptest.NewRecorder()
	m.ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Errorf("with the key: %d", w.Code)
	}
}

func TestMethods(t *testing.T) {
	h := Methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "got") }, http.MethodPost: nil}
	if w, _ := serve(t, h, "GET", "/x"); w.Body.String() != "got" {
		t.Fatalf("GET: %q", w.Body)
	}
	w, e := serve(t, h, "PATCH", "/x")
	if w.Code != http.StatusBadRequest || e.Code != wire.InvalidArgument || w.Header().Get("Allow") != "GET, POST" {
		t.Fatalf("PATCH: %d %q %+v", w.Code, w.Header().Get("Allow"), e)
	}
}

// BenchmarkMux is the cost of the typed 404/405 on a matched route: one more pattern lookup than a
// plain ServeMux.
func BenchmarkMux(b *testing.B) {
	h := func(w http.ResponseWriter, r *http.Request) {}
	m, plain := &Mux{}, http.NewServeMux()
	for _, p := range []string{"GET /v1/regions", "GET /healthz", "/v1/sandbox/", "GET /v1/things/{id}"} {
		m.HandleFunc(p, h)
		plain.HandleFunc(p, h)
	}
	r := httptest.NewRequest("GET", "/v1/sandbox/files/list", nil)
	w := httptest.NewRecorder()
	b.Run("httpx.Mux", func(b *testing.B) {
		for b.Loop() {
			m.ServeHTTP(w, r)
		}
	})
	b.Run("http.ServeMux", func(b *testing.B) {
		for b.Loop() {
			plain.ServeHTTP(w, r)
		}
	})
}
