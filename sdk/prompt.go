package warren

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// A prompt's identity (docs/PROTOCOL.md#prompt-identity): Send and Prompt give every prompt a fresh uuid. A
// runner that says so in ready (promptUuids) echoes it in the session_info messages of the prompt's turn
// and in the details of every error about the prompt, and runs a prompt sent again with the same uuid
// once. Prompt ends on its own turn only, and after a failover reconnect the prompts whose turn had not
// been seen starting are sent again on the new connection (the runner ignores those it already has).

// maxUnstarted bounds the prompts remembered for sending again (the runner queues at most 8).
const maxUnstarted = 64

// unstartedPrompt is a prompt sent with a uuid whose turn the session has not seen start.
type unstartedPrompt struct {
	uuid  string
	frame []byte
}

// newPromptUUID returns a random UUID (version 4).
func newPromptUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// sendPrompt sends one prompt with a fresh uuid, remembered until its turn is seen starting.
func (s *Session) sendPrompt(ctx context.Context, prompt string) (string, error) {
	id := newPromptUUID()
	msg := userMessage{
		Type:      wire.TypeUser,
		SessionID: s.id,
		Message:   userMessageBody{Role: "user", Content: prompt},
		UUID:      id,
	}
	b, err := json.Marshal(msg)
	if err == nil {
		s.mu.Lock()
		if len(s.unstarted) >= maxUnstarted {
			s.unstarted = slices.Delete(s.unstarted, 0, len(s.unstarted)-maxUnstarted+1)
		}
		s.unstarted = append(s.unstarted, unstartedPrompt{uuid: id, frame: b})
		s.mu.Unlock()
	}
	if err := s.write(ctx, msg); err != nil {
		s.forgetPrompt(id)
		return "", err
	}
	return id, nil
}

func (s *Session) forgetPrompt(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetPromptLocked(id)
}

func (s *Session) forgetPromptLocked(id string) {
	s.unstarted = slices.DeleteFunc(s.unstarted, func(p unstartedPrompt) bool { return p.uuid == id })
}

// promptSeenLocked forgets the prompt a message shows started (a session_info naming it) or answered (an
// error naming it); s.mu is held.
func (s *Session) promptSeenLocked(ev Event) {
	if len(s.unstarted) == 0 {
		return
	}
	if id := promptOf(ev); id != "" {
		s.forgetPromptLocked(id)
	}
}

// promptOf is the uuid of the prompt a session_info or an error names ("" when none).
func promptOf(ev Event) string {
	if info, ok := ev.SessionInfo(); ok {
		return info.UUID
	}
	if e := ev.Err(); e != nil {
		id, _ := e.Details["uuid"].(string)
		return id
	}
	return ""
}

// resendPrompts writes the prompts whose turn has not been seen starting on conn, a connection that
// replaced a lost one and whose runner dedupes prompts by uuid (its ready said so): a prompt the runner
// already has is ignored there, one lost with the old connection runs now. The replay of the messages the
// session missed came before ready, so the prompts it shows started are forgotten by now.
func (s *Session) resendPrompts(ctx context.Context, conn chanConn) error {
	s.mu.Lock()
	pending := slices.Clone(s.unstarted)
	if !s.dedupes {
		pending = nil // an older runner would run them twice
	}
	s.mu.Unlock()
	for _, p := range pending {
		if err := conn.Write(ctx, websocket.MessageText, p.frame); err != nil {
			return fmt.Errorf("warren: send a prompt again after reconnecting: %w", err)
		}
	}
	return nil
}
