package wire

import (
	"bytes"
	"encoding/json"
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

// A log wait's regular expression is matched by the runner against every line of output: one whose
// program is large ([a-z]{1000}b runs seconds a 64 KiB line, and compiling [a-z]{1000} repeated takes most
// of a second) is refused before it is compiled; ordinary ones are taken.
func TestProcWaitRegexCostBounded(t *testing.T) {
	wait := func(pattern string) error {
		b, _ := json.Marshal(ProcWaitRequest{For: WaitLog, Pattern: pattern, Regex: true})
		_, _, err := DecodeProcWait(bytes.NewReader(b))
		return err
	}
	for _, p := range []string{"[a-z]{1000}b", strings.Repeat("[a-z]{1000}", 92), strings.Repeat("a?", 500) + "b", "(?:a{30}){30}", "x{300}"} {
		if err := wait(p); CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), "too costly") {
			t.Errorf("pattern %.40q: %v, want a refusal as too costly", p, err)
		}
	}
	for _, p := range []string{`listening on (\d+)`, `ready|started|Server running at http://localhost:\d+`, `^\[\w+\] (INFO|WARN|ERROR) .*done in [0-9.]+ms$`, "x{200}"} {
		if err := wait(p); err != nil {
			t.Errorf("pattern %q: %v", p, err)
		}
	}
}
