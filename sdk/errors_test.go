package warren

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		code        Code
		message     string
	}{
		{"json budget", 402, "application/json", `{"code":"budget_exceeded","message":"the AI budget is spent","details":{"limit":5}}`,
			CodeBudgetExceeded, "the AI budget is spent"},
		{"json unauthenticated", 401, "application/json", `{"code":"unauthenticated","message":"token expired"}`,
			CodeUnauthenticated, "token expired"},
		{"json concurrency on 429", 429, "application/json", `{"code":"concurrency_limit","message":"3 sessions"}`,
			CodeConcurrencyLimit, "3 sessions"},
		{"plain 429", 429, "text/plain", "slow down", CodeRateLimited, "slow down"},
		{"proxy 503", 503, "text/html", "", CodeUnavailable, "Service Unavailable"},
		{"proxy 502", 502, "text/html", "<html>bad gateway</html>", CodeInternal, "<html>bad gateway</html>"},
		{"unknown code in json", 404, "application/json", `{"code":"nope","message":"x"}`, CodeNotFound, `{"code":"nope","message":"x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			c, err := New(srv.URL, "tok")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Sandbox().List(context.Background(), ".")
			var we *Error
			if !errors.As(err, &we) {
				t.Fatalf("err = %v (%T), want *Error", err, err)
			}
			if we.Code != tt.code || we.Message != tt.message {
				t.Fatalf("got %s %q, want %s %q", we.Code, we.Message, tt.code, tt.message)
			}
			if !IsCode(fmt.Errorf("wrapped: %w", err), tt.code) {
				t.Fatal("IsCode does not see through wrapping")
			}
		})
	}
}

func TestCloseError(t *testing.T) {
	prev := &Error{Code: CodeBudgetExceeded, Message: "the full, long message the close frame could not hold"}
	tests := []struct {
		name    string
		status  int
		reason  string
		prev    *Error
		code    Code // "" for no error
		message string
	}{
		{"normal", 1000, "", nil, "", ""},
		{"normal with reason", 1000, "bye", nil, "", ""},
		{"json reason", 4402, `{"code":"budget_exceeded","message":"out of money"}`, nil, CodeBudgetExceeded, "out of money"},
		{"json reason wins", 1011, `{"code":"timeout","message":"too slow"}`, nil, CodeTimeout, "too slow"},
		{"plain reason", 4429, "slow down", nil, CodeRateLimited, "slow down"},
		{"bare code reason", 4402, "budget_exceeded", nil, CodeBudgetExceeded, "connection closed with status 4402"},
		{"bare code completed by prev", 4402, "budget_exceeded", prev, CodeBudgetExceeded, prev.Message},
		{"prev with other code ignored", 4401, "", prev, CodeUnauthenticated, "connection closed with status 4401"},
		{"empty reason", 1013, "", nil, CodeUnavailable, "connection closed with status 1013"},
		{"too big", 1009, "", nil, CodePayloadTooLarge, "connection closed with status 1009"},
		{"concurrency", 4430, "3 of 3 sessions", nil, CodeConcurrencyLimit, "3 of 3 sessions"},
		{"going away", 1001, "shutting down", nil, CodeUnavailable, "shutting down"},
		{"unknown status", 3000, "x", nil, CodeInternal, "x"},
		{"bad json", 4401, `{"code":"bogus"}`, nil, CodeUnauthenticated, `{"code":"bogus"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := closeError(tt.status, tt.reason, tt.prev)
			if tt.code == "" {
				if e != nil {
					t.Fatalf("got %v, want nil", e)
				}
				return
			}
			if e == nil || e.Code != tt.code || e.Message != tt.message {
				t.Fatalf("got %v, want %s: %s", e, tt.code, tt.message)
			}
		})
	}
	// Every code survives the trip through its close code, with and without a JSON reason.
	for _, code := range []Code{CodeInvalidArgument, CodeUnauthenticated, CodePermissionDenied, CodeNotFound, CodeConflict,
		CodePayloadTooLarge, CodeBudgetExceeded, CodeRateLimited, CodeConcurrencyLimit, CodeUnavailable, CodeTimeout, CodeInternal} {
		if e := closeError(code.CloseCode(), "m", nil); e.Code != code {
			t.Errorf("close code %d: got %s, want %s", code.CloseCode(), e.Code, code)
		}
		b, _ := json.Marshal(wire.Errorf(code, "m"))
		if e := closeError(code.CloseCode(), string(b), nil); e.Code != code || e.Message != "m" {
			t.Errorf("close code %d with JSON: got %s, want %s", code.CloseCode(), e.Code, code)
		}
	}
}

func TestEventErr(t *testing.T) {
	for _, raw := range []string{
		`{"type":"error","seq":3,"payload":{"code":"rate_limited","message":"m"}}`,
		`{"type":"error","seq":3,"code":"rate_limited","message":"m"}`,
	} {
		ev, err := decodeEvent([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if e := ev.Err(); e == nil || e.Code != CodeRateLimited || e.Message != "m" || ev.Seq != 3 {
			t.Fatalf("%s: Err() = %v, seq %d", raw, e, ev.Seq)
		}
	}
	ev, _ := decodeEvent([]byte(`{"type":"assistant"}`))
	if ev.Err() != nil {
		t.Fatal("Err() of an assistant event is not nil")
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{`{"type":"control","seq":1,"payload":{"action":"ready","data":{"sessionId":"s"}}}`,
		`{"type":"error","code":"x"}`, `{"type":"tool_call","payload":null}`, `{"seq":1e3}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := decodeEvent(b)
		if err != nil {
			return
		}
		if !bytes.Equal(ev.Raw, b) {
			t.Fatal("Raw is not the message")
		}
		ev.Control()
		ev.ToolCall()
		if ev.Type == "error" && ev.Err() == nil {
			t.Fatal("Err() of an error event is nil")
		}
	})
}
