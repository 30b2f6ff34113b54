// Package scheduler decides where a user's sandbox runs and starts it: placements with compare-and-set
// claims (the single-ownership guarantee of DESIGN.md §4), sandbox drivers (local processes, later Nomad),
// supervision of live runners and compute metering.
package scheduler
