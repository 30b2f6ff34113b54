package cockroach

// Migrations are the ledger schema's steps, for tests that build a database as an older binary left it.
var Migrations = migrations

// SessionMigrations and RateMigrations are the steps of the schemas "sessions" and "rates", which New
// migrates with the ledger's.
var (
	SessionMigrations = sessionMigrations
	RateMigrations    = rateMigrations
)
