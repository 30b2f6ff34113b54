package session

import (
	"bytes"
	"context"
	"slices"
	"sync"

	"github.com/warren-mesh/warren/internal/wire"
)

// entry is one message in a session's history.
type entry struct {
	seq   int64
	frame []byte
}

// subscriber is one attached connection's outbound queue. The session delivers without blocking; a
// subscriber whose queue is full is dropped: gone is closed and onDrop runs (closing the connection, which
// also unblocks a write stuck on a client that stopped reading). The client must reconnect with lastSeq.
type subscriber struct {
	ch     chan []byte
	gone   chan struct{}
	onDrop func()
	meta   any  // the connection's Meta (who is asking), for the turns it starts; under the session's mu
	host   bool // the connection is a host (role host); under the session's mu
}

// conversation is one session's state: its sequence counter, its recent history for replay, its attached
// connections and its running turn. id, maxHist and maxBytes are set before the conversation is shared
// and never change; used is guarded by the hub's mu; mu guards every other field (opts changes when a host
// adds its tools), and the meta of the subscribers in subs.
type conversation struct {
	id   string
	opts wire.SessionOptions

	mu          sync.Mutex
	seq         int64
	state       string
	hist        []entry
	histBytes   int
	maxHist     int
	maxBytes    int
	subs        map[*subscriber]struct{}
	turnCancel  context.CancelFunc      // non-nil while a turn runs
	turnUUID    string                  // the uuid of the running turn's prompt ("" when it had none)
	prompts     []string                // uuids of the last prompts queued or run, oldest first (prompt.go)
	queued      []queuedTurn            // prompts waiting for the running turn
	pending     map[string]*pendingCall // client tool calls waiting for their tool_result
	answered    []string                // ids of the last calls that ended, oldest first
	hostServers map[string]bool         // names of the client tool servers hosts declared
	hostTools   map[string]bool         // their tools as the agent calls them (mcp__<server>__<tool>)
	used        uint64                  // hub tick of the last attach; guarded by the hub's mu
}

func newConversation(id string, opts wire.SessionOptions, maxHist, maxBytes int) *conversation {
	s := &conversation{
		id: id, state: wire.StateReady,
		maxHist: maxHist, maxBytes: maxBytes,
		subs: make(map[*subscriber]struct{}),
	}
	s.opts = opts
	s.opts.Role, s.opts.Root = "", "" // the connection's, not the session's
	if opts.Role == wire.RoleHost {
		s.markHost(opts.MCPServers)
	}
	return s
}

// markHost records the client tool servers of list, and their tools, as a host's.
func (s *conversation) markHost(list []wire.MCPServer) {
	if s.hostServers == nil {
		s.hostServers, s.hostTools = make(map[string]bool), make(map[string]bool)
	}
	for _, srv := range list {
		if srv.Kind() != wire.MCPClient {
			continue
		}
		s.hostServers[srv.Name] = true
		for _, t := range srv.Tools {
			s.hostTools[srv.ToolName(t.Name)] = true
		}
	}
}

// hostAttachedLocked says whether a host connection is attached; s.mu is held.
func (s *conversation) hostAttachedLocked() bool {
	for sub := range s.subs {
		if sub.host {
			return true
		}
	}
	return false
}

// withHostLocked is the session's options once the tools of a host connection (o, with role host) are
// added (docs/PROTOCOL.md#host-tools): its client tool servers replace those of the same names an earlier
// host declared and are appended otherwise; a name the session's own options use is conflict, and a host
// attaching to an open session declares nothing but client tool servers. Other connections leave the
// options as they are. s.mu is held.
func (s *conversation) withHostLocked(o wire.SessionOptions) (wire.SessionOptions, error) {
	if o.Role != wire.RoleHost {
		return s.opts, nil
	}
	merged := s.opts
	merged.MCPServers = slices.Clone(s.opts.MCPServers)
	for i, srv := range o.MCPServers {
		if srv.Kind() != wire.MCPClient {
			return merged, wire.Errorf(wire.InvalidArgument, "session option mcpServers[%d]: a host attaching to an open session declares only client tool servers", i)
		}
		j := slices.IndexFunc(merged.MCPServers, func(m wire.MCPServer) bool { return m.Name == srv.Name })
		switch {
		case j < 0:
			merged.MCPServers = append(merged.MCPServers, srv)
		case s.hostServers[srv.Name]:
			merged.MCPServers[j] = srv // a host coming back, or another host taking over
		default:
			return merged, wire.Errorf(wire.Conflict, "session option mcpServers[%d]: session %s already has an MCP server named %q", i, s.id, srv.Name)
		}
	}
	if err := merged.Validate(); err != nil {
		return merged, err
	}
	return merged, nil
}

// addHostLocked adds a host's tools to the session's options (withHostLocked); the agent gets them from
// its next turn. s.mu is held.
func (s *conversation) addHostLocked(o wire.SessionOptions) error {
	merged, err := s.withHostLocked(o)
	if err != nil {
		return err
	}
	s.opts = merged
	s.markHost(o.MCPServers)
	return nil
}

func (s *conversation) model() string {
	if s.opts.Model != "" {
		return s.opts.Model
	}
	return "default"
}

// emit gives frame the next seq, records it for replay and delivers it to every attached connection.
func (s *conversation) emit(frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitLocked(frame)
}

func (s *conversation) emitLocked(frame []byte) {
	s.seq++
	f := wire.WithSeq(frame, s.seq)
	s.hist = append(s.hist, entry{seq: s.seq, frame: f})
	s.histBytes += len(f)
	for len(s.hist) > 1 && (len(s.hist) > s.maxHist || s.histBytes > s.maxBytes) {
		s.histBytes -= len(s.hist[0].frame)
		s.hist[0] = entry{}
		s.hist = s.hist[1:]
	}
	for sub := range s.subs {
		s.deliverLocked(sub, f)
	}
}

// sendTo gives frame the next seq and delivers it to one connection only, without recording it: answers
// that concern only that connection (pong, its handshake, errors about its frames).
func (s *conversation) sendTo(sub *subscriber, frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sendToLocked(sub, frame)
}

func (s *conversation) sendToLocked(sub *subscriber, frame []byte) {
	s.seq++
	s.deliverLocked(sub, wire.WithSeq(frame, s.seq))
}

func (s *conversation) deliverLocked(sub *subscriber, f []byte) {
	if _, ok := s.subs[sub]; !ok {
		return
	}
	select {
	case sub.ch <- f:
	default:
		delete(s.subs, sub)
		close(sub.gone)
		if sub.onDrop != nil {
			go sub.onDrop() // never under the session's lock
		}
	}
}

// MaxResumeSeq bounds how far a client's lastSeq may move a session's seq (2^53, the largest integer a
// JavaScript client reads exactly): a larger one is not taken, so seq can never overflow.
const MaxResumeSeq = 1 << 53

// attach registers a new subscriber, first queueing the history after lastSeq (when given), so that no
// message is lost or duplicated between replay and live delivery. When lastSeq is ahead of the session
// (the runner restarted and lost it), seq continues after lastSeq so a client that drops duplicates by seq
// keeps every new message.
func (s *conversation) attach(lastSeq *int64, queue int, onDrop func()) *subscriber {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := &subscriber{ch: make(chan []byte, queue), gone: make(chan struct{}), onDrop: onDrop}
	s.subs[sub] = struct{}{}
	if lastSeq == nil {
		return sub
	}
	if *lastSeq > s.seq && *lastSeq <= MaxResumeSeq {
		s.seq = *lastSeq
	}
	for _, e := range s.hist {
		if e.seq > *lastSeq {
			s.deliverLocked(sub, e.frame)
		}
	}
	return sub
}

// detach removes sub; when that leaves the session with no connection and no turn, cool runs (with s.mu
// held).
func (s *conversation) detach(sub *subscriber, cool func(id string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, sub)
	if len(s.subs) == 0 && s.turnCancel == nil {
		cool(s.id)
	}
}

// idle reports whether nothing holds the session: no connection and no turn.
func (s *conversation) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs) == 0 && s.turnCancel == nil
}

// interrupt cancels the running turn and drops the prompts queued behind it, each told so. Prompts that
// arrive after it (a client sending its next prompt as soon as it sees the interrupted turn's result, before
// the turn has wound down) are queued as usual and run next.
func (s *conversation) interrupt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turnCancel != nil {
		s.turnCancel()
		s.dropQueuedLocked(wire.Errorf(wire.Conflict, "interrupted before it started"))
	}
}

func sessionInfo(id, state string) []byte {
	return wire.Control(wire.ActionSessionInfo, map[string]any{"state": state, "sessionId": id})
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0] == '{' && b[len(b)-1] == '}'
}
