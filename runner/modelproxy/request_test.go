package modelproxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestParseMessagesRequest(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		model     string
		maxTokens int64
		budget    int64
		wantErr   bool
	}{
		{name: "plain", body: `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[]}`, model: "claude-sonnet-4-5", maxTokens: 1024},
		{name: "no max_tokens", body: `{"model":"m","messages":[{"role":"user","content":"max_tokens"}]}`, model: "m", maxTokens: -1},
		{name: "nested max_tokens ignored", body: `{"model":"m","metadata":{"max_tokens":5},"max_tokens":7}`, model: "m", maxTokens: 7},
		{name: "escaped key", body: `{"model":"m","max\u005ftokens":9}`, model: "m", maxTokens: 9},
		{name: "other case is another key", body: `{"model":"m","MAX_TOKENS":9}`, model: "m", maxTokens: -1},
		{name: "whitespace", body: " {\n \"model\" : \"m\" ,\t\"max_tokens\" :  12 }\n", model: "m", maxTokens: 12},
		{name: "thinking", body: `{"model":"m","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":3000}}`, model: "m", maxTokens: 4000, budget: 3000},
		{name: "adaptive thinking", body: `{"model":"m","max_tokens":4000,"thinking":{"type":"adaptive"}}`, model: "m", maxTokens: 4000},
		{name: "empty object", body: `{}`, maxTokens: -1},
		{name: "duplicate max_tokens", body: `{"max_tokens":1,"max_tokens":100000}`, wantErr: true},
		{name: "duplicate model", body: `{"model":"claude-3-haiku","model":"claude-opus-4"}`, wantErr: true},
		{name: "float max_tokens", body: `{"max_tokens":1e3}`, wantErr: true},
		{name: "string max_tokens", body: `{"max_tokens":"100"}`, wantErr: true},
		{name: "negative max_tokens", body: `{"max_tokens":-1}`, wantErr: true},
		{name: "huge max_tokens", body: `{"max_tokens":99999999999999999999}`, wantErr: true},
		{name: "model not a string", body: `{"model":3}`, wantErr: true},
		{name: "array", body: `[]`, wantErr: true},
		{name: "trailing data", body: `{"model":"m"} {}`, wantErr: true},
		{name: "truncated", body: `{"model":"m"`, wantErr: true},
		{name: "invalid", body: `{"model":"m",}`, wantErr: true},
		{name: "duplicate unknown key", body: `{"model":"m","foo":1,"foo":2}`, wantErr: true},
		{name: "duplicate known key", body: `{"model":"m","metadata":{},"metadata":{"user_id":"x"}}`, wantErr: true},
		{name: "duplicate through an escape", body: `{"model":"m","top_k":1,"top\u005fk":2}`, wantErr: true},
		{name: "service_tier not a string", body: `{"model":"m","service_tier":1}`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := parseMessagesRequest([]byte(tc.body))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parsed %q, want an error", tc.body)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.model != tc.model || r.maxTokens != tc.maxTokens || r.thinkingBudget() != tc.budget {
				t.Errorf("got model %q max_tokens %d budget %d, want %q %d %d", r.model, r.maxTokens, r.thinkingBudget(), tc.model, tc.maxTokens, tc.budget)
			}
		})
	}
}

// Every top-level key is recorded once, in body order, as encoding/json decodes it; service_tier is read.
func TestParseTopLevelKeys(t *testing.T) {
	r, err := parseMessagesRequest([]byte(`{"model":"m","MODEL":"x","servic\u0065_tier":"auto","messages":[{"service_tier":"priority"}],"x":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.keys, ","); got != "model,MODEL,service_tier,messages,x" || r.serviceTier != "auto" {
		t.Errorf("keys %q, service_tier %q", got, r.serviceTier)
	}
}

// The count body holds the fields that make up the input, byte for byte, and nothing else.
func TestCountBody(t *testing.T) {
	r, err := parseMessagesRequest([]byte(`{"max_tokens":5,"model":"m", "system" : "s","stream":true,"messages":[{"role":"user","content":"hi"}],"metadata":{},"tools":[{"name":"t"}],"thinking":{"type":"adaptive"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","system":"s","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"t"}],"thinking":{"type":"adaptive"}}`
	if got := string(r.countBody()); got != want {
		t.Errorf("count body %s, want %s", got, want)
	}
	if r, _ := parseMessagesRequest([]byte(`{}`)); string(r.countBody()) != `{}` {
		t.Errorf("count body of {}: %s", r.countBody())
	}
}

func TestWithLimits(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		max      int64
		thinking int64
		want     string
	}{
		{"unchanged", `{"model":"m","max_tokens":100}`, 100, 0, `{"model":"m","max_tokens":100}`},
		{"lowered", `{"model":"m", "max_tokens" : 32000 ,"x":1}`, 7, 0, `{"model":"m", "max_tokens" : 7 ,"x":1}`},
		{"inserted", `{"model":"m"}`, 32000, 0, `{"max_tokens":32000,"model":"m"}`},
		{"inserted into empty", ` { } `, 5, 0, ` {"max_tokens":5 } `},
		{"thinking lowered", `{"max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":3000},"z":[]}`, 2000, 1999,
			`{"max_tokens":2000,"thinking":{"budget_tokens":1999,"type":"enabled"},"z":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := parseMessagesRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.withLimits(tc.max, tc.thinking)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// FuzzMessagesRequest: whatever the agent sends, a body the proxy accepts is rewritten into valid JSON
// whose top-level max_tokens is exactly the bound the proxy chose, read back by the same parser and by
// encoding/json, and nothing else of the body changes.
func FuzzMessagesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m"}`, `{}`, ` {"max_tokens" : 5 } `, `{"thinking":{"type":"enabled","budget_tokens":2048},"max_tokens":4096}`,
		`{"max\u005ftokens":3}`, `{"a":{"max_tokens":1},"b":"max_tokens"}`, `[1]`, `{"max_tokens":1,"max_tokens":2}`,
		`{"tools":[{"name":"a"},{"type":"web_search_20250305","name":"w"}],"speed":"fast"}`,
		`{"tools":[{"typ\u0065":"bash_20250124"}],"mcp_servers":[],"inference_geo":"us","container":null}`,
		`{"tools":null}`, `{"tools":[{"type":"a","type":"b"}]}`, `{"tools":[{"Type":"x"}]}`,
		`{"service_tier":"auto","Service_tier":"priority","safeguards":[],"x":1}`, `{"a":1,"\u0061":2}`,
	} {
		f.Add([]byte(s), int64(100))
	}
	f.Fuzz(func(t *testing.T, body []byte, bound int64) {
		r, err := parseMessagesRequest(body)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		checkPolicyFields(t, body, r)
		bound = max(0, bound%maxMaxTokens)
		out, err := r.withLimits(bound, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) {
			t.Fatalf("rewrote %q into invalid JSON %q", body, out)
		}
		again, err := parseMessagesRequest(out)
		if err != nil {
			t.Fatalf("rewritten body %q does not parse: %v", out, err)
		}
		if again.maxTokens != bound || again.model != r.model {
			t.Fatalf("rewritten %q reads max_tokens %d model %q, want %d %q", out, again.maxTokens, again.model, bound, r.model)
		}
		var before, after map[string]json.RawMessage
		if err := json.Unmarshal(body, &before); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatal(err)
		}
		var got int64
		if err := json.Unmarshal(after["max_tokens"], &got); err != nil || got != bound {
			t.Fatalf("encoding/json reads max_tokens %s from %q, want %d", after["max_tokens"], out, bound)
		}
		delete(before, "max_tokens")
		delete(after, "max_tokens")
		if len(before) != len(after) {
			t.Fatalf("keys changed: %q -> %q", body, out)
		}
		for k, v := range before {
			if string(after[k]) != string(v) {
				t.Fatalf("%q changed: %s -> %s", k, v, after[k])
			}
		}
	})
}

// checkPolicyFields: what the parser reports of the fields the policy judges (top-level keys, tool types,
// gated keys, service_tier) and the count body it builds are what encoding/json (and so, for an accepted
// body without duplicates, the API) reads.
func checkPolicyFields(t *testing.T, body []byte, r *messagesRequest) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
	}
	if len(r.keys) != len(top) {
		t.Fatalf("%q: keys %q, encoding/json sees %d", body, r.keys, len(top))
	}
	for _, k := range r.keys {
		if _, ok := top[k]; !ok {
			t.Fatalf("%q: key %q not in the body", body, k)
		}
	}
	var tier string
	if raw, ok := top["service_tier"]; ok {
		if err := json.Unmarshal(raw, &tier); err != nil {
			t.Fatalf("%q: service_tier accepted, not a string to encoding/json", body)
		}
	}
	if tier != r.serviceTier {
		t.Fatalf("%q: service_tier %q, encoding/json reads %q", body, r.serviceTier, tier)
	}
	var counted map[string]json.RawMessage
	if err := json.Unmarshal(r.countBody(), &counted); err != nil {
		t.Fatalf("%q: count body %q: %v", body, r.countBody(), err)
	}
	for _, k := range countFields {
		if string(counted[k]) != string(top[k]) {
			t.Fatalf("%q: count body has %s = %s, the body %s", body, k, counted[k], top[k])
		}
	}
	if len(counted) > len(countFields) || len(r.countBody()) > len(body) {
		t.Fatalf("%q: count body %q", body, r.countBody())
	}
	var gated []string
	for _, k := range gatedKeys {
		if _, ok := top[k]; ok {
			gated = append(gated, k)
		}
	}
	if len(gated) != len(r.gated) {
		t.Fatalf("%q: gated keys %q, encoding/json sees %q", body, r.gated, gated)
	}
	for _, k := range r.gated {
		if _, ok := top[k]; !ok {
			t.Fatalf("%q: gated key %q not in the body", body, k)
		}
	}
	var tools []map[string]json.RawMessage
	if raw, ok := top["tools"]; ok {
		if err := json.Unmarshal(raw, &tools); err != nil {
			t.Fatalf("%q: tools accepted, encoding/json refuses: %v", body, err)
		}
	}
	if len(tools) != len(r.toolTypes) {
		t.Fatalf("%q: %d tool types, encoding/json sees %d tools", body, len(r.toolTypes), len(tools))
	}
	for i, tool := range tools {
		var typ string
		if raw, ok := tool["type"]; ok {
			if err := json.Unmarshal(raw, &typ); err != nil {
				t.Fatalf("%q: tools[%d].type accepted, not a string to encoding/json", body, i)
			}
		}
		if typ != r.toolTypes[i] {
			t.Fatalf("%q: tools[%d].type %q, encoding/json reads %q", body, i, r.toolTypes[i], typ)
		}
	}
}

// BenchmarkParseMessagesRequest parses a body shaped like the CLI's: 20 tools with JSON schemas, a
// system prompt and a long conversation (about 400 KB).
func BenchmarkParseMessagesRequest(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"system":[{"type":"text","text":"` + strings.Repeat("You are a coding agent. ", 400) + `"}],"tools":[`)
	for i := range 20 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"Tool%d","description":%q,"input_schema":{"type":"object","properties":{"command":{"type":"string","description":%q}},"required":["command"]}}`,
			i, strings.Repeat("Runs a thing. ", 100), strings.Repeat("The command. ", 50))
	}
	sb.WriteString(`],"messages":[`)
	for i := range 200 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"role":"user","content":[{"type":"text","text":%q}]}`, strings.Repeat("line of output\n", 120))
	}
	sb.WriteString(`],"thinking":{"type":"enabled","budget_tokens":10000},"metadata":{"user_id":"u"}}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := parseMessagesRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
