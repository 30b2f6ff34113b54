package modelserver_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/modelserver"
)

// FuzzHandleMessages feeds arbitrary bodies and scenario names to the handler: it must never panic and must
// always answer either an Anthropic JSON object (a message or an error) or a well-formed event stream that
// ends with message_stop.
func FuzzHandleMessages(f *testing.F) {
	for _, seed := range []struct{ scenario, body string }{
		{"plain", body(f, true, userText("hello"))},
		{"auto", body(f, false, userText(envReminder, "create a.txt containing hi"))},
		{"auto", body(f, true, userText("run echo hi"))},
		{"write_bash", body(f, true, userText(envReminder, "x"), assistant(map[string]any{"type": "tool_use", "id": "toolu_warren_s0_b0_00", "name": "Write", "input": map[string]any{}}), toolResults("toolu_warren_s0_b0_00"))},
		{"two_tools", `{"stream":true,"tools":[{"name":"Write"}],"system":[{"type":"text","text":"Working directory: /x"}],"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_warren_s99999999999999999999_b0_x"}]}]}`},
		{"long", `{"stream":true,"messages":[]}`},
		{"huge_usage", `{"max_tokens":1,"messages":[{"role":"user","content":7}]}`},
		{"nope", `{}`},
		{"plain", `null`},
		{"plain", `[]`},
		{"plain", `{"messages":[null,1,"x",{"role":"user","content":[null,{"type":"text","text":5}]}]}`},
		{"auto", `{"messages":[{"role":"user","content":"create \u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9 containing \ud83d\ude00\ud83d\ude00\ud83d\ude00\ud83d\ude00\ud83d\ude00\ud83d\ude00"}],"stream":true}`},
	} {
		f.Add(seed.scenario, []byte(seed.body))
	}
	s := modelserver.New(modelserver.Options{Delay: time.Nanosecond})
	f.Fuzz(func(t *testing.T, scenario string, data []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(string(data)))
		req.Header.Set("X-Api-Key", "k")
		req.Header.Set(modelserver.HeaderScenario, scenario)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		s.Reset()

		switch ct := rec.Header().Get("Content-Type"); {
		case strings.HasPrefix(ct, "text/event-stream"):
			if rec.Code != http.StatusOK {
				t.Fatalf("stream with status %d", rec.Code)
			}
			events := parseSSE(t, rec.Body)
			if len(events) == 0 || events[len(events)-1].name != "message_stop" {
				t.Fatalf("stream does not end with message_stop: %v", events)
			}
			_ = assemble(t, events)
		case ct == "application/json":
			var v struct {
				Type  string
				Error *struct{ Type, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatalf("answer is not a JSON object: %v: %s", err, rec.Body)
			}
			switch {
			case rec.Code == http.StatusOK && v.Type == "message":
			case rec.Code >= 400 && v.Type == "error" && v.Error != nil && v.Error.Type != "" && v.Error.Message != "":
			default:
				t.Fatalf("status %d with body %s", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("content type %q, status %d: %s", ct, rec.Code, rec.Body)
		}
	})
}
