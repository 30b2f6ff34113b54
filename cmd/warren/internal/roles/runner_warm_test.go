package roles

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

const testAssignment = `{"issuer":"https://iss.example","user":"u1","epoch":3,"region":"r1"}`

func postAssign(t *testing.T, url, key, body string) (int, *wire.Error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/assign", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, wire.ReadHTTPError(resp.StatusCode, b)
}

// The assignment endpoint takes exactly one valid assignment, from a caller with the key: a second one,
// even concurrent, gets 409 conflict and is never silently dropped.
func TestWarmHandler(t *testing.T) {
	got := make(chan assignment, 1)
	srv := httptest.NewServer(warmHandler("SECRET-key", got, slog.New(slog.DiscardHandler)))
	defer srv.Close()

	if status, e := postAssign(t, srv.URL, "wrong", testAssignment); status != http.StatusUnauthorized || e.Code != wire.Unauthenticated {
		t.Fatalf("wrong key: %d %+v", status, e)
	}
	// The bearer rule of every role (docs/PROTOCOL.md#auth-header): any case of the scheme; the key exact.
	for _, auth := range []string{"secret-key", "SECRET-ke", "SECRET-keyx", "SECRET -key", "Basic SECRET-key"} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/assign", strings.NewReader(testAssignment))
		req.Header.Set("Authorization", "Bearer "+auth)
		if strings.HasPrefix(auth, "Basic") {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%q: %d", auth, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/assign", strings.NewReader(`{"issuer":"i","user":"u","epoch":0}`))
	req.Header.Set("Authorization", "bEARER\tSECRET-key")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a lowercase scheme with the key must pass auth (then fail on epoch 0): %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Unknown paths and methods: unauthenticated without the key, wire errors with it.
	for _, c := range []struct {
		method, path, key string
		want              int
	}{{"GET", "/", "", 401}, {"GET", "/nope", "SECRET-key", 404}, {"GET", "/v1/assign", "SECRET-key", 400}} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if we := wire.ReadHTTPError(resp.StatusCode, b); resp.StatusCode != c.want || !strings.HasPrefix(string(b), `{"code":`) {
			t.Fatalf("%s %s: %d %+v", c.method, c.path, resp.StatusCode, we)
		}
	}
	if status, e := postAssign(t, srv.URL, "SECRET-key", `{"issuer":"i","user":"u","epoch":0}`); status != http.StatusBadRequest || e.Code != wire.InvalidArgument {
		t.Fatalf("epoch 0: %d %+v", status, e)
	}
	select {
	case a := <-got:
		t.Fatalf("a rejected request was taken as assignment %+v", a)
	default:
	}

	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses[i], _ = postAssign(t, srv.URL, "SECRET-key", testAssignment) })
	}
	wg.Wait()
	accepted, conflicts := 0, 0
	for _, s := range statuses {
		switch s {
		case http.StatusAccepted:
			accepted++
		case http.StatusConflict:
			conflicts++
		}
	}
	if accepted != 1 || conflicts != n-1 {
		t.Fatalf("statuses %v: want one 202 and %d 409", statuses, n-1)
	}
	select {
	case a := <-got:
		if a != (assignment{Issuer: "https://iss.example", User: "u1", Epoch: 3, Region: "r1"}) {
			t.Fatalf("assignment %+v", a)
		}
	default:
		t.Fatal("the accepted assignment was not delivered")
	}
	if status, e := postAssign(t, srv.URL, "SECRET-key", testAssignment); status != http.StatusConflict || e.Code != wire.Conflict {
		t.Fatalf("assignment after the first: %d %+v", status, e)
	}
}

// A warm runner announces itself, takes its assignment; one whose announcement is claimed without an
// assignment following gives up after the grace instead of waiting for ever.
func TestServeWarm(t *testing.T) {
	srv := testenv.StartConsul(t)
	reg, err := consul.New(consul.Config{Addr: srv.Addr(), Prefix: "warm-test/", SessionTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)

	type result struct {
		a    assignment
		addr string
		err  error
	}
	serve := func(alloc string, grace time.Duration) <-chan result {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan result, 1)
		go func() {
			a, addr, err := serveWarm(ctx, ln, "SECRET-"+alloc, alloc, "r1", reg, grace, log)
			done <- result{a, addr, err}
		}()
		return done
	}
	claim := func() registry.Warm {
		t.Helper()
		for {
			w, err := reg.ClaimWarm(ctx, "r1")
			if err == nil {
				return w
			}
			if !errors.Is(err, registry.ErrNoWarm) || ctx.Err() != nil {
				t.Fatalf("ClaimWarm: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("Assigned", func(t *testing.T) {
		done := serve("a1", time.Minute)
		w := claim()
		if w.Alloc != "a1" || w.Key != "SECRET-a1" {
			t.Fatalf("claimed %+v", w)
		}
		if status, e := postAssign(t, "http://"+w.Addr, w.Key, testAssignment); status != http.StatusAccepted {
			t.Fatalf("assign: %d %+v", status, e)
		}
		r := <-done
		if r.err != nil || r.a.User != "u1" || r.addr != w.Addr {
			t.Fatalf("serveWarm = %+v", r)
		}
	})

	t.Run("ClaimedNeverAssigned", func(t *testing.T) {
		done := serve("a2", 500*time.Millisecond)
		if w := claim(); w.Alloc != "a2" {
			t.Fatalf("claimed %+v", w)
		}
		select {
		case r := <-done:
			if r.err == nil || !strings.Contains(r.err.Error(), "no assignment") {
				t.Fatalf("serveWarm of a runner claimed and never assigned = %+v, want an error", r)
			}
		case <-ctx.Done():
			t.Fatal("a runner claimed and never assigned kept waiting")
		}
	})

	t.Run("StoppedUnclaimed", func(t *testing.T) {
		sctx, stop := context.WithCancel(ctx)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := serveWarm(sctx, ln, "SECRET-a3", "a3", "r1", reg, time.Minute, log)
			done <- err
		}()
		for {
			n, err := reg.CountWarm(ctx, "r1")
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the runner did not announce itself")
			}
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("serveWarm after cancel = %v", err)
		}
		if n, err := reg.CountWarm(ctx, "r1"); err != nil || n != 0 {
			t.Fatalf("CountWarm after a warm runner stopped unclaimed = %d, %v; want 0", n, err)
		}
	})
}

// Untrusted assignment bodies give a typed *wire.Error, never a panic; what is accepted passes the checks.
func FuzzParseAssignment(f *testing.F) {
	f.Add([]byte(testAssignment))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":1}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":0}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":-1,"region":"r"}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":9223372036854775808}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":1,"extra":true}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":1} {}`))
	f.Add([]byte(`{"issuer":"` + strings.Repeat("x", 257) + `","user":"u","epoch":1}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":1,"region":"` + strings.Repeat("r", 65) + `"}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":1,"template":"py"}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":1,"template":"../py"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte("\xff{"))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := parseAssignment(in)
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.InvalidArgument {
				t.Fatalf("error %v (%T), want a *wire.Error invalid_argument", err, err)
			}
			if a != (assignment{}) {
				t.Fatalf("assignment %+v returned with error %v", a, err)
			}
			return
		}
		if a.Issuer == "" || a.User == "" || len(a.Issuer) > 256 || len(a.User) > 256 || a.Epoch < 1 || len(a.Region) > 64 || (a.Template != "" && !token.ValidTemplate(a.Template)) {
			t.Fatalf("accepted %+v", a)
		}
	})
}
