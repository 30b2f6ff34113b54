package wire

import (
	"errors"
	"strings"
	"testing"
)

// TestClientMessageNamesExact: agent-channel messages are read with exact, case-sensitive names and no
// duplicates (docs/PROTOCOL.md#json). Under encoding/json the last of two "type" members won and a "Type"
// or "CallID" filled the field, so a message could mean one thing to the edge's check and another to the
// runner. A duplicate is invalid_argument with details.field naming it, at any depth of the payload.
func TestClientMessageNamesExact(t *testing.T) {
	refused := []struct{ name, msg, field string }{
		{"type twice", `{"type":"ping","type":"control","payload":{"action":"close"}}`, "/type"},
		{"payload twice", `{"type":"control","payload":{"action":"interrupt"},"payload":{"action":"close"}}`, "/payload"},
		{"control action twice", `{"type":"control","payload":{"action":"interrupt","action":"close"}}`, "/payload/action"},
		{"user role twice", `{"type":"user","message":{"role":"user","role":"assistant","content":"hi"}}`, "/message/role"},
		{"duplicate deep in user content", `{"type":"user","message":{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}}`, "/message/content/0/text"},
		{"callId twice", `{"type":"tool_result","payload":{"callId":"a","callId":"b","result":{"content":[]}}}`, "/payload/callId"},
		{"init option twice", `{"type":"init","payload":{"model":"claude-haiku-4-5","model":"claude-opus-4-1"}}`, "/payload/model"},
		{"invalid UTF-8", "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"\xff\"}}", "/message/content"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseClientMessage([]byte(tt.msg))
			var we *Error
			if !errors.As(err, &we) || we.Code != InvalidArgument || we.Details["field"] != tt.field {
				t.Fatalf("ParseClientMessage = %+v, %v (%#v); want invalid_argument with details.field %s", m, err, we, tt.field)
			}
		})
	}
	variants := []struct{ name, msg string }{
		{"Type does not set the type", `{"type":"ping","Type":"control"}`},
		{"TYPE alone is no type", `{"TYPE":"ping"}`},
		{"Action does not set the action", `{"type":"control","payload":{"action":"interrupt","Action":"close"}}`},
		{"Role does not set the role", `{"type":"user","message":{"role":"user","Role":"assistant","content":"hi"}}`},
		{"Model is not the model option", `{"type":"init","payload":{"Model":"claude-opus-4-1"}}`},
	}
	want := []string{TypePing, "", ActionInterrupt, "user", ""}
	for i, tt := range variants {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseClientMessage([]byte(tt.msg))
			switch i {
			case 0:
				if err != nil || m.Type != want[i] {
					t.Fatalf("ParseClientMessage = %+v, %v; want type %s", m, err, want[i])
				}
			case 1, 4:
				if CodeOf(err) != InvalidArgument {
					t.Fatalf("ParseClientMessage = %+v, %v; want invalid_argument", m, err)
				}
			case 2:
				c, cerr := m.Control()
				if err != nil || cerr != nil || c.Action != want[i] {
					t.Fatalf("control = %+v, %v, %v; want action %s", c, err, cerr, want[i])
				}
			case 3:
				if err != nil {
					t.Fatalf("ParseClientMessage = %v; want the role variant ignored", err)
				}
			}
		})
	}
	t.Run("tool result CallID is not callId", func(t *testing.T) {
		_, err := ParseToolResult([]byte(`{"callId":"a","CallID":"b","result":{"content":[]}}`))
		if CodeOf(err) != InvalidArgument {
			t.Fatalf("ParseToolResult = %v; want invalid_argument (unknown field)", err)
		}
	})
}

// TestRESTBodyNamesExact: a sandbox REST body (here a background process start, read by DecodeBody like
// every /v1/sandbox body) naming a field twice is refused with details.field, and a case variant of a field
// is an unknown field, refused: under encoding/json {"command":"true","Command":"rm -rf ~"} ran rm.
func TestRESTBodyNamesExact(t *testing.T) {
	for body, field := range map[string]string{
		`{"command":"true","command":"rm -rf ~"}`:    "/command",
		`{"command":"true","Command":"rm -rf ~"}`:    "/Command",
		`{"command":"true","env":{"A":"1","A":"2"}}`: "/env/A",
	} {
		p, err := DecodeProcStart(strings.NewReader(body))
		var we *Error
		if !errors.As(err, &we) || we.Code != InvalidArgument || we.Details["field"] != field {
			t.Errorf("DecodeProcStart(%s) = %+v, %v; want invalid_argument with details.field %s", body, p, err, field)
		}
	}
}
