package edge

import (
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// channel runs one channel of k through m: ready for session, then the frames' seqs and calls, then its
// end (dropped unless the client closed it).
func channel(m *resumeMemory, k admissionKey, session string, dropped bool, frames ...runnerFrame) {
	t := &channelTrack{mem: m, key: k}
	t.delivered(runnerFrame{seq: 1, session: session})
	for _, f := range frames {
		t.delivered(f)
	}
	t.end(dropped)
}

// The memory resumes a reconnect after what was delivered: point gives the largest seq and the calls,
// byCall finds the session of a delivered call, orphan is the user's one session whose client was lost
// (none when two were, or the client closed, or a channel holds it, or 10 minutes passed), and another
// user's sessions are never found.
func TestResumeMemory(t *testing.T) {
	clk := newFakeClock()
	m := &resumeMemory{now: clk.Now}
	uma, eve := admissionKey{"iss", "uma"}, admissionKey{"iss", "eve"}

	channel(m, uma, "s1", true, runnerFrame{seq: 7}, runnerFrame{seq: 9, callID: "c1"}, runnerFrame{seq: 8})
	p := m.point(uma, "s1")
	if p.lastSeq == nil || *p.lastSeq != 9 || len(p.calls) != 1 || p.calls[0] != "c1" {
		t.Fatalf("point %+v, want after 9 with c1", p)
	}
	if p, ok := m.byCall(uma, "c1"); !ok || p.session != "s1" {
		t.Fatalf("byCall c1 = %+v %v", p, ok)
	}
	if _, ok := m.byCall(eve, "c1"); ok {
		t.Fatal("another user's call found")
	}
	if p := m.point(eve, "s1"); p.lastSeq != nil {
		t.Fatalf("another user's session resumes after %d", *p.lastSeq)
	}
	if p, ok := m.orphan(uma); !ok || p.session != "s1" {
		t.Fatalf("orphan = %+v %v, want s1", p, ok)
	}

	live := &channelTrack{mem: m, key: uma}
	live.delivered(runnerFrame{seq: 10, session: "s1"})
	if _, ok := m.orphan(uma); ok {
		t.Fatal("a session a channel holds is an orphan")
	}
	live.end(false) // the client closed it
	if _, ok := m.orphan(uma); ok {
		t.Fatal("a session its client closed is an orphan")
	}

	channel(m, uma, "s2", true)
	channel(m, uma, "s3", true)
	if p, ok := m.orphan(uma); ok {
		t.Fatalf("two lost sessions, orphan %+v: want none", p)
	}
	channel(m, eve, "e1", true)
	clk.Advance(resumeFor)
	if p := m.point(eve, "e1"); p.lastSeq != nil {
		t.Fatal("a session past resumeFor is remembered")
	}
	if _, ok := m.orphan(eve); ok {
		t.Fatal("a session past resumeFor is an orphan")
	}
}

// The memory is bounded: sessions per user, calls per session, users per edge.
func TestResumeMemoryBounded(t *testing.T) {
	clk := newFakeClock()
	m := &resumeMemory{now: clk.Now}
	k := admissionKey{"iss", "uma"}
	for i := range 3 * maxResumeSessions {
		channel(m, k, "s"+strings.Repeat("x", i), true)
	}
	if n := len(m.users[k]); n != maxResumeSessions {
		t.Fatalf("%d sessions remembered, want %d", n, maxResumeSessions)
	}
	var frames []runnerFrame
	for i := range 2 * maxResumeCalls {
		frames = append(frames, runnerFrame{seq: int64(i + 2), callID: "c" + strings.Repeat("y", i)})
	}
	channel(m, k, "calls", true, frames...)
	if p := m.point(k, "calls"); len(p.calls) != maxResumeCalls {
		t.Fatalf("%d calls remembered, want %d", len(p.calls), maxResumeCalls)
	}
	for i := range maxResumeUsers + 10 {
		channel(m, admissionKey{"iss", "u" + strings.Repeat("z", i%50) + string(rune('a'+i%26)) + time.Duration(i).String()}, "s", true)
	}
	if n := len(m.users); n > maxResumeUsers {
		t.Fatalf("%d users remembered, want at most %d", n, maxResumeUsers)
	}
}

// readRunnerFrame reads a runner frame's seq, and a tool call's callId or a ready's session id; any other
// frame, or one that only looks like them, gives nothing more.
func TestReadRunnerFrame(t *testing.T) {
	for _, c := range []struct {
		in   string
		want runnerFrame
	}{
		{string(wire.WithSeq(wire.Control(wire.ActionReady, map[string]any{"sessionId": "s-1"}), 3)), runnerFrame{seq: 3, session: "s-1"}},
		{`{"seq":12,"payload":{"callId":"call_1","toolName":"t"},"type":"tool_call"}`, runnerFrame{seq: 12, callID: "call_1"}},
		{`{"seq":5,"type":"assistant","message":{"content":"\"type\":\"tool_call\"}"}}`, runnerFrame{seq: 5}},
		{`{"seq":6,"payload":{"action":"session_info","data":{"sessionId":"s-2"}},"type":"control"}`, runnerFrame{seq: 6}},
		{`{"payload":{"code":"unavailable"},"type":"error"}`, runnerFrame{}},
		{`{"seq":x,"type":"tool_call"}`, runnerFrame{}},
		{"{\"pAYloAd\":{\"CAllId\":\"\xc7\"},\"type\":\"tool_call\"}", runnerFrame{}}, // found by FuzzReadRunnerFrame
		{`{"seq":7,"payload":{"callId":"a","callId":"b"},"type":"tool_call"}`, runnerFrame{seq: 7}},
	} {
		if got := readRunnerFrame([]byte(c.in)); got != c.want {
			t.Errorf("readRunnerFrame(%s) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// FuzzReadRunnerFrame: a runner's frames come from the user's sandbox, which the tenant controls; reading
// them never panics, and what is read is what the frame says.
func FuzzReadRunnerFrame(f *testing.F) {
	f.Add([]byte(`{"seq":12,"payload":{"callId":"call_1"},"type":"tool_call"}`))
	f.Add([]byte(`{"seq":3,"payload":{"action":"ready","data":{"sessionId":"s"}},"type":"control"}`))
	f.Add([]byte(`{"seq":-1,"type":"control"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := readRunnerFrame(data)
		if got.callID != "" && got.session != "" {
			t.Fatalf("%q read as a tool call and a ready: %+v", data, got)
		}
		if (got.callID != "" || got.session != "") && !strings.Contains(string(data), got.callID+got.session) &&
			!strings.Contains(string(data), `\`) {
			t.Fatalf("%q gave %+v, not in the frame", data, got)
		}
	})
}
