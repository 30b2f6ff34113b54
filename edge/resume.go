package edge

import (
	"bytes"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// A client that reconnects without init (Chucky Cloud's TypeScript SDK: its autoReconnect never sends init
// again and says nothing of what it received) cannot give a lastSeq. The edge remembers for it, per user
// and session, what it delivered to the session's clients (docs/PROTOCOL.md#opening): the largest seq and
// the callIds of the tool calls. A reconnect without init is opened with that lastSeq, so the session's
// messages the client missed are replayed and none twice, and the tool calls the runner sends again to a
// reconnect are dropped when the client already has them.
const (
	// resumeFor is how long after its last channel ended a session is remembered.
	resumeFor = 10 * time.Minute
	// maxResumeUsers and maxResumeSessions bound the memory: users remembered on this edge, and sessions
	// per user (the oldest are forgotten first).
	maxResumeUsers    = 10000
	maxResumeSessions = 8
	// maxResumeCalls is how many of a session's latest delivered tool calls are remembered.
	maxResumeCalls = 64
)

// resumeMark is what the edge remembers of one session of one user.
type resumeMark struct {
	session string
	lastSeq atomic.Int64 // the largest seq delivered to a client of this session through this edge
	calls   []string     // callIds of the tool calls delivered, the latest last (guarded by the memory's mu)
	live    int          // channels of the session open on this edge
	dropped bool         // its last channel ended without the client closing it (it may come back)
	at      time.Time
}

// resumeMemory is the edge's memory of recent sessions per user. Safe for concurrent use.
type resumeMemory struct {
	now   func() time.Time
	mu    sync.Mutex                     // guards users
	users map[admissionKey][]*resumeMark // the latest ended last
}

// resumePoint is where a reconnect without init resumes a session: after lastSeq (nil: nothing is known,
// nothing is replayed), the tool calls in calls already delivered.
type resumePoint struct {
	session string
	lastSeq *int64
	calls   []string
}

// find is the remembered mark of k's session, nil when none; mu is held.
func (m *resumeMemory) findLocked(k admissionKey, session string) *resumeMark {
	for _, r := range m.users[k] {
		if r.session == session && (r.live > 0 || m.now().Sub(r.at) < resumeFor) {
			return r
		}
	}
	return nil
}

// point is the resume point of k's session (no lastSeq when the edge knows nothing of it).
func (m *resumeMemory) point(k admissionKey, session string) resumePoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := resumePoint{session: session}
	if r := m.findLocked(k, session); r != nil && r.lastSeq.Load() > 0 {
		seq := r.lastSeq.Load()
		p.lastSeq, p.calls = &seq, slices.Clone(r.calls)
	}
	return p
}

// byCall is the resume point of k's session whose delivered tool call callID is, if any.
func (m *resumeMemory) byCall(k admissionKey, callID string) (resumePoint, bool) {
	m.mu.Lock()
	var session string
	for _, r := range m.users[k] {
		if slices.Contains(r.calls, callID) && m.findLocked(k, r.session) == r {
			session = r.session
		}
	}
	m.mu.Unlock()
	if session == "" {
		return resumePoint{}, false
	}
	return m.point(k, session), true
}

// orphan is the resume point of k's one session whose client was lost (its last channel ended without the
// client closing it, recently, and no channel has it now); false when there is none or more than one.
func (m *resumeMemory) orphan(k admissionKey) (resumePoint, bool) {
	m.mu.Lock()
	var found *resumeMark
	for _, r := range m.users[k] {
		if r.dropped && r.live == 0 && m.now().Sub(r.at) < resumeFor {
			if found != nil {
				m.mu.Unlock()
				return resumePoint{}, false
			}
			found = r
		}
	}
	m.mu.Unlock()
	if found == nil {
		return resumePoint{}, false
	}
	return m.point(k, found.session), true
}

// attach counts a channel of k's session open on this edge and returns the session's mark.
func (m *resumeMemory) attach(k admissionKey, session string) *resumeMark {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.findLocked(k, session)
	if r == nil {
		r = &resumeMark{session: session}
		m.addLocked(k, r)
	}
	r.live++
	r.dropped = false
	return r
}

// delivered records what a channel of r's session delivered: seq, and the tool call callID ("": none).
// It is recorded at once, not when the channel ends: a client may reconnect before the edge has seen
// its old connection go.
func (m *resumeMemory) delivered(r *resumeMark, seq int64, callID string) {
	for old := r.lastSeq.Load(); seq > old && !r.lastSeq.CompareAndSwap(old, seq); old = r.lastSeq.Load() {
	}
	if callID == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r.calls = append(r.calls, callID)
	if over := len(r.calls) - maxResumeCalls; over > 0 {
		r.calls = slices.Delete(r.calls, 0, over)
	}
}

// addLocked remembers r for k, forgetting k's oldest sessions and, when the edge remembers too many users,
// users whose sessions all ended long enough ago (else any one); mu is held.
func (m *resumeMemory) addLocked(k admissionKey, r *resumeMark) {
	if m.users == nil {
		m.users = map[admissionKey][]*resumeMark{}
	}
	if _, ok := m.users[k]; !ok && len(m.users) >= maxResumeUsers {
		m.evictLocked()
	}
	marks := slices.DeleteFunc(m.users[k], func(o *resumeMark) bool { return o.live == 0 && m.now().Sub(o.at) >= resumeFor })
	if len(marks) >= maxResumeSessions {
		marks = slices.Delete(marks, 0, len(marks)-maxResumeSessions+1)
	}
	m.users[k] = append(marks, r)
}

// evictLocked forgets the users with nothing live or recent; when every one has, one user; mu is held.
func (m *resumeMemory) evictLocked() {
	for k, marks := range m.users {
		if !slices.ContainsFunc(marks, func(r *resumeMark) bool { return r.live > 0 || m.now().Sub(r.at) < resumeFor }) {
			delete(m.users, k)
		}
	}
	for k := range m.users {
		if len(m.users) < maxResumeUsers {
			return
		}
		delete(m.users, k)
	}
}

// detach records the end of a channel of r's session, dropped when the client did not close it.
func (m *resumeMemory) detach(r *resumeMark, dropped bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.live = max(r.live-1, 0)
	r.dropped = dropped && r.live == 0
	r.at = m.now()
}

// channelTrack follows what one agent channel delivers to its client. Only the goroutine relaying the
// runner's messages uses it, until the channel ends.
type channelTrack struct {
	mem  *resumeMemory
	key  admissionKey
	mark *resumeMark // the session's, from the runner's ready (nil until then)
	// known are the callIds the client had before this channel (a reconnect without init): the runner
	// sends a reconnect the pending tool calls again, and the client must not run one twice.
	known []string
	early []string // callIds delivered before the ready (a reconnect's replay precedes its handshake)
}

// runnerFrame is what the edge reads of a runner's message: its seq, and for a tool call or the
// handshake's ready the callId or the session id.
type runnerFrame struct {
	seq     int64
	callID  string
	session string
}

// Suffixes of the runner's messages the edge reads: the runner writes "type" last
// ({"seq":n,"payload":{...},"type":"tool_call"}), so other frames are not decoded.
var (
	toolCallSuffix = []byte(`"type":"tool_call"}`)
	controlSuffix  = []byte(`"type":"control"}`)
)

// readRunnerFrame reads seq (the runner writes it first: {"seq":n,...}) and, for a tool_call or a ready,
// what identifies it.
func readRunnerFrame(data []byte) runnerFrame {
	var f runnerFrame
	const prefix = `{"seq":`
	if bytes.HasPrefix(data, []byte(prefix)) {
		rest := data[len(prefix):]
		if end := bytes.IndexByte(rest, ','); end > 0 {
			f.seq, _ = strconv.ParseInt(string(rest[:end]), 10, 64)
		}
	}
	tail := bytes.TrimRight(data, " \t\r\n")
	isCall, isControl := bytes.HasSuffix(tail, toolCallSuffix), bytes.HasSuffix(tail, controlSuffix) && len(data) <= maxErrorFrame
	if !isCall && !isControl {
		return f
	}
	var m struct {
		Type    string `json:"type"`
		Payload struct {
			CallID string `json:"callId"`
			Action string `json:"action"`
			Data   struct {
				SessionID string `json:"sessionId"`
			} `json:"data"`
		} `json:"payload"`
	}
	// Exactly (strictjson): the frame's strings are the tenant's, and encoding/json would read "pAYloAd"
	// and "CAllId" as the fields, and invalid UTF-8 as U+FFFD.
	if strictjson.Unmarshal(data, &m) != nil {
		return f
	}
	switch {
	case m.Type == wire.TypeToolCall:
		f.callID = m.Payload.CallID
	case m.Type == wire.TypeControl && m.Payload.Action == wire.ActionReady:
		f.session = m.Payload.Data.SessionID
	}
	return f
}

// skip reports whether f is a tool call the client already had before this channel.
func (t *channelTrack) skip(f runnerFrame) bool {
	return t != nil && f.callID != "" && slices.Contains(t.known, f.callID)
}

// delivered records f as written to the client.
func (t *channelTrack) delivered(f runnerFrame) {
	if t == nil {
		return
	}
	if t.mark == nil {
		if f.session == "" {
			if f.callID != "" && len(t.early) < maxResumeCalls {
				t.early = append(t.early, f.callID)
			}
			return
		}
		t.mark = t.mem.attach(t.key, f.session)
		for _, id := range t.early {
			t.mem.delivered(t.mark, 0, id)
		}
		t.early = nil
	}
	t.mem.delivered(t.mark, f.seq, f.callID)
}

// end records the channel's end in the memory; dropped when the client did not close it.
func (t *channelTrack) end(dropped bool) {
	if t != nil && t.mark != nil {
		t.mem.detach(t.mark, dropped)
	}
}

// failed forgets that session's client was lost when this channel, which the edge opened into it on its
// own, never got the runner's ready: it is not an orphan any more (its seq and calls are kept).
func (t *channelTrack) failed(session string) {
	if t.mark != nil {
		return
	}
	t.mem.mu.Lock()
	defer t.mem.mu.Unlock()
	if r := t.mem.findLocked(t.key, session); r != nil {
		r.dropped = false
	}
}
