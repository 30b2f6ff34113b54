package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCodesMapBothWays(t *testing.T) {
	for c, e := range codeTable {
		if got := c.HTTPStatus(); got != e.http {
			t.Errorf("%s.HTTPStatus = %d, want %d", c, got, e.http)
		}
		if got := CodeForCloseCode(c.CloseCode()); got != c {
			t.Errorf("CodeForCloseCode(%d) = %s, want %s", c.CloseCode(), got, c)
		}
	}
	if CodeForHTTPStatus(429) != RateLimited {
		t.Errorf("429 must read as rate_limited")
	}
	if Code("bogus").HTTPStatus() != 500 || Code("bogus").CloseCode() != 1011 {
		t.Errorf("unknown codes must map to internal")
	}
}

func TestPublicHidesCauses(t *testing.T) {
	cause := errors.New("pq: password authentication failed for user warren")
	for _, tc := range []struct {
		name string
		err  error
		code Code
		log  bool
	}{
		{"plain error", cause, Internal, true},
		{"internal wire error", Wrap(Internal, cause, "db exploded"), Internal, true},
		{"client error keeps message", Wrap(Unavailable, cause, "ledger down"), Unavailable, false},
		{"wrapped client error", fmt.Errorf("ctx: %w", Errorf(NotFound, "no such file")), NotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, logIt := Public(tc.err)
			if pub.Code != tc.code || logIt != tc.log {
				t.Fatalf("Public = %+v, %v; want %s, %v", pub, logIt, tc.code, tc.log)
			}
			b, _ := json.Marshal(pub)
			if strings.Contains(string(b), "password") || strings.Contains(string(b), "exploded") {
				t.Fatalf("cause leaked: %s", b)
			}
		})
	}
}

func TestErrorIsMatchesCode(t *testing.T) {
	err := fmt.Errorf("admit: %w", Errorf(BudgetExceeded, "spent"))
	if !errors.Is(err, &Error{Code: BudgetExceeded}) {
		t.Fatal("errors.Is by code failed")
	}
	if errors.Is(err, &Error{Code: NotFound}) {
		t.Fatal("errors.Is matched the wrong code")
	}
}

func TestParseClientMessage(t *testing.T) {
	ok := []string{
		`{"type":"init","payload":{"model":"m","systemPrompt":"be brief","maxTurns":3}}`,
		`{"type":"init","payload":{"systemPrompt":{"type":"preset","preset":"claude_code","append":"x"}}}`,
		`{"type":"init"}`,
		`{"type":"user","session_id":"s","message":{"role":"user","content":"hi"},"parent_tool_use_id":null}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}`,
		`{"type":"control","payload":{"action":"interrupt"}}`,
		`{"type":"tool_result","payload":{"callId":"c1","result":{"content":[{"type":"text","text":"x"}]}}}`,
		`{"type":"ping","payload":{"timestamp":1}}`,
		`{"type":"ping"}`,
	}
	for _, s := range ok {
		if _, err := ParseClientMessage([]byte(s)); err != nil {
			t.Errorf("ParseClientMessage(%s) = %v", s, err)
		}
	}
	bad := map[string]Code{
		`not json`:        InvalidArgument,
		`[]`:              InvalidArgument,
		`{}`:              InvalidArgument,
		`{"type":"nope"}`: InvalidArgument,
		`{"type":"user"}`: InvalidArgument,
		`{"type":"user","message":{"role":"assistant","content":"x"}}`:                                InvalidArgument,
		`{"type":"user","message":{"role":"user","content":5}}`:                                       InvalidArgument,
		`{"type":"control","payload":{"action":"explode"}}`:                                           InvalidArgument,
		`{"type":"tool_result","payload":{}}`:                                                         InvalidArgument,
		`{"type":"init","payload":{"maxTurns":"x"}}`:                                                  InvalidArgument,
		`{"type":"ping"} {"type":"ping"}`:                                                             InvalidArgument,
		`{"type":"user","message":{"role":"user","content":"` + strings.Repeat("a", MaxFrame) + `"}}`: PayloadTooLarge,
	}
	for s, want := range bad {
		_, err := ParseClientMessage([]byte(s))
		if CodeOf(err) != want {
			t.Errorf("ParseClientMessage(%.60s) = %v, want %s", s, err, want)
		}
	}
}

func TestWithSeq(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"assistant","message":{}}`: `{"seq":7,"type":"assistant","message":{}}`,
		"{}\n":                              `{"seq":7}`,
		`{ }`:                               `{"seq":7}`,
		`[1]`:                               `[1]`,
	} {
		if got := string(WithSeq([]byte(in), 7)); got != want {
			t.Errorf("WithSeq(%q) = %s, want %s", in, got, want)
		}
	}
}

func FuzzParseClientMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"init","payload":{"model":"m","sessionId":"abc","lastSeq":3,"mcpServers":[{"name":"n","tools":[{"name":"t"}]}]}}`,
		`{"type":"user","session_id":"s","message":{"role":"user","content":"hi"}}`,
		`{"type":"control","payload":{"action":"close"}}`,
		`{"type":"tool_result","payload":{"callId":"c","result":{"content":[]}}}`,
		`{"type":"ping","payload":{"timestamp":12}}`,
		`{"type":"init","payload":{"systemPrompt":{"type":"preset"}}}`,
		`{"type":`, `null`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseClientMessage(b)
		if err != nil {
			var we *Error
			if !errors.As(err, &we) || !we.Code.Valid() {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// Whatever parses must name a known type and survive a re-encode and re-parse.
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := ParseClientMessage(out); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %s: %v", b, out, err)
		}
		seqd := WithSeq(out, 1)
		var v map[string]any
		if err := json.Unmarshal(seqd, &v); err != nil {
			t.Fatalf("WithSeq broke JSON: %s: %v", seqd, err)
		}
	})
}

func TestGrantRoundTrip(t *testing.T) {
	g := Grant{Issuer: "i", User: "u", Window: "day", AIMicros: 5, ComputeSeconds: -1, Permissions: json.RawMessage(`{"model":"m"}`)}
	back, err := DecodeGrant(g.Encode())
	if err != nil || back.Issuer != "i" || back.AIMicros != 5 || string(back.Permissions) != `{"model":"m"}` {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
	for _, bad := range []string{"!!", "e30x", "bm90IGpzb24"} {
		if _, err := DecodeGrant(bad); CodeOf(err) != InvalidArgument {
			t.Errorf("DecodeGrant(%q) = %v", bad, err)
		}
	}
}

func FuzzDecodeGrant(f *testing.F) {
	f.Add(Grant{Issuer: "i", User: "u", Window: "day"}.Encode())
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := DecodeGrant(s); err != nil && !CodeOf(err).Valid() {
			t.Fatal(err)
		}
	})
}
