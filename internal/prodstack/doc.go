// Package prodstack holds the end-to-end test of the production topology on one machine (issue 4): real
// Vault, Consul, Nomad (raw_exec), PostgreSQL (for CockroachDB) and an S3 server (versitygw), all started by
// the test from the `make tools` cache, and `warren billing`, `warren scheduler` and `warren edge` as
// separate processes, with the real Claude Code CLI in each sandbox talking to the scripted model.
package prodstack
