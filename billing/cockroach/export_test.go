package cockroach

// Migrations are the ledger schema's steps, for tests that build a database as an older binary left it.
var Migrations = migrations
