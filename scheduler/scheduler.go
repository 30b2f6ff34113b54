// Package scheduler decides where a user's sandbox runs and starts it: placements with compare-and-set
// claims (single ownership, docs/ARCHITECTURE.md#single-ownership), the Driver port (adapters: local
// processes in scheduler/local, Nomad jobs in scheduler/nomad), supervision of live runners, compute
// metering, and adoption of the runners a previous scheduler process left serving.
package scheduler
