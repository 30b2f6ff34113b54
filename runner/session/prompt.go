package session

import (
	"maps"
	"slices"

	"github.com/warren-mesh/warren/internal/wire"
)

// A prompt's identity (docs/PROTOCOL.md#prompt-identity). A client names a prompt with the optional uuid of
// its user message; the hub echoes it in the session_info messages of the prompt's turn (processing,
// waiting_tool, ready) and in the details of every error about the prompt, so a client can tell its own
// turn's messages and errors from an earlier turn's. The session remembers the uuids of its last
// rememberedPrompts prompts that were queued or run: the same uuid again (a client re-sending a prompt
// after a reconnect, not knowing whether it arrived) is ignored, so a prompt never runs twice.

// rememberedPrompts bounds the uuids a session remembers.
const rememberedPrompts = 64

// knowsPromptLocked says whether a prompt with this uuid is queued, running or among the last ones run;
// s.mu is held.
func (s *conversation) knowsPromptLocked(uuid string) bool {
	return uuid != "" && slices.Contains(s.prompts, uuid)
}

// rememberPromptLocked records a prompt's uuid as queued or run, forgetting the oldest beyond
// rememberedPrompts; s.mu is held. A uuid is at most 100 bytes (wire.MaxPromptUUID), so the set is bounded.
func (s *conversation) rememberPromptLocked(uuid string) {
	if uuid == "" {
		return
	}
	if len(s.prompts) >= rememberedPrompts {
		s.prompts = slices.Delete(s.prompts, 0, len(s.prompts)-rememberedPrompts+1)
	}
	s.prompts = append(s.prompts, uuid)
}

// answerPromptLocked tells the client that a prompt will not run, with err. A prompt with a uuid is
// answered to the whole session, recorded for replay, with details.uuid naming it: the connection that sent
// it may have been replaced (a client resuming with lastSeq gets the answer). A prompt without one is
// answered to its connection only, when still attached: others could not tell it from an error about their
// own prompts. s.mu is held.
func (s *conversation) answerPromptLocked(sub *subscriber, uuid string, err *wire.Error) {
	if uuid != "" {
		s.emitLocked(wire.ErrorMessage(promptError(err, uuid)))
		return
	}
	s.sendToLocked(sub, wire.ErrorMessage(err))
}

// promptError is err about the prompt named uuid: details.uuid added ("" leaves err as it is).
func promptError(err *wire.Error, uuid string) *wire.Error {
	if uuid == "" {
		return err
	}
	d := maps.Clone(err.Details)
	if d == nil {
		d = make(map[string]any, 1)
	}
	d["uuid"] = uuid
	return err.WithDetails(d)
}

// promptInfo is a session_info with state, naming the running turn's prompt when it has a uuid.
func promptInfo(id, state, uuid string) []byte {
	if uuid == "" || (state != wire.StateProcessing && state != wire.StateWaitingTool && state != wire.StateReady) {
		return sessionInfo(id, state)
	}
	return wire.Control(wire.ActionSessionInfo, map[string]any{"state": state, "sessionId": id, "uuid": uuid})
}
