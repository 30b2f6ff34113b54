package session

// Forget drops the session id from the hub, as an eviction would, unless it is live (a client attached or
// a turn running): it reports false then and keeps it. A session the hub does not hold is forgotten
// already (true). The runner calls it before it deletes the session's transcript, so that a client
// reconnecting with the id finds neither.
func (h *Hub) Forget(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[id]
	if !ok {
		return true
	}
	if !s.idle() {
		return false
	}
	delete(h.sessions, id)
	return true
}

// Live reports whether the hub holds the session id with a client attached or a turn running.
func (h *Hub) Live(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[id]
	return ok && !s.idle()
}
