package vault

// CurrentToken is the token the Store sends, for tests of renewal and login.
func (s *Store) CurrentToken() string { return s.client.Token() }
