package sqlite

// Migrations lets tests build a database as an older binary left it.
var Migrations = migrations

// RateMigrations are the steps of the schema "rates", which New migrates with the ledger's.
var RateMigrations = rateMigrations
