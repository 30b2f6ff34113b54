package sqlite

// Migrations lets tests build a database as an older binary left it.
var Migrations = migrations
