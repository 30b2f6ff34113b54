package cockroach

// Migrations are the ledger schema's steps, for tests that build a database as an older binary left it.
var Migrations = migrations

// SessionMigrations and RateMigrations are the steps of the schemas "sessions" and "rates", which New
// migrates with the ledger's.
var (
	SessionMigrations = sessionMigrations
	RateMigrations    = rateMigrations
)

// PendingWrites is how many Reserve, Settle, Release and Record calls wait for the next write batch.
func (l *Ledger) PendingWrites() int {
	l.writes.mu.Lock()
	defer l.writes.mu.Unlock()
	return len(l.writes.pending)
}

// PendingReads is how many Usage calls wait for the next read batch.
func (l *Ledger) PendingReads() int {
	l.reads.mu.Lock()
	defer l.reads.mu.Unlock()
	return len(l.reads.pending)
}
