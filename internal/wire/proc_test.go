package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeProcRequests: whatever a client sends as a process start, wait or signal, the decoders answer
// a bounded, valid request or a typed error, and never panic.
func FuzzDecodeProcRequests(f *testing.F) {
	for _, s := range []string{
		`{"command":"sleep 1","args":["a"],"cwd":"x","env":{"A":"b"}}`,
		`{"for":"exit"}`, `{"for":"port","port":8080,"timeoutMs":10}`,
		`{"for":"log","pattern":"ready (\\d+)","regex":true,"offset":5}`,
		`{"for":"log","pattern":"(","regex":true}`, `{"command":""}`, `{"command":"x"} {}`, `TERM`, `sigkill`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := DecodeProcStart(bytes.NewReader(b)); err == nil {
			if p.Command == "" || len(p.Command) > MaxProcCommand || len(p.Args) > MaxProcArgs || len(p.Env) > MaxProcEnv {
				t.Fatalf("accepted out of bounds: %+v", p)
			}
		} else if c := CodeOf(err); c != InvalidArgument && c != PayloadTooLarge {
			t.Fatalf("start error code %s: %v", c, err)
		}
		w, match, err := DecodeProcWait(bytes.NewReader(b))
		switch {
		case err != nil:
			if c := CodeOf(err); c != InvalidArgument && c != PayloadTooLarge {
				t.Fatalf("wait error code %s: %v", c, err)
			}
		case w.For == WaitLog:
			if match == nil || len(w.Pattern) > MaxProcPattern {
				t.Fatalf("log wait without matcher: %+v", w)
			}
			match(string(b))
		case w.For != WaitExit && (w.For != WaitPort || w.Port < 1 || w.Port > 65535):
			t.Fatalf("accepted wait %+v", w)
		}
		if name, err := ParseSignal(string(b)); err == nil {
			if !strings.EqualFold(strings.TrimPrefix(strings.ToUpper(string(b)), "SIG"), name) {
				t.Fatalf("signal %q parsed as %s", b, name)
			}
		} else if CodeOf(err) != InvalidArgument || len(err.Error()) > 300 {
			t.Fatalf("signal error: %v", err)
		}
	})
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{"TERM": "TERM", "sigterm": "TERM", "SIGKILL": "KILL", "winch": "WINCH"} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "9", "SEGV", "SIG", "TERM ", "SIGSIGTERM"} {
		var we *Error
		if _, err := ParseSignal(in); !errors.As(err, &we) || we.Code != InvalidArgument {
			t.Errorf("ParseSignal(%q) = %v, want invalid_argument", in, err)
		}
	}
}
