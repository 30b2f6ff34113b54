package claude

import "fmt"

// pid is the host pid of a session's CLI process, 0 when it has none.
func (d *Driver) pid(id string) int {
	d.mu.Lock()
	s := d.sessions[id]
	d.mu.Unlock()
	if s == nil {
		return 0
	}
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if s.live == nil || s.live.exited() {
		return 0
	}
	return s.live.p.Pid()
}

// killForTest kills a session's CLI process the way an OOM kill would.
func (d *Driver) killForTest(id string) error {
	d.mu.Lock()
	s := d.sessions[id]
	d.mu.Unlock()
	if s == nil {
		return fmt.Errorf("no session %s", id)
	}
	s.liveMu.Lock()
	p := s.live
	s.liveMu.Unlock()
	if p == nil {
		return fmt.Errorf("session %s has no process", id)
	}
	return p.p.Kill()
}
