// Package jobs holds Warren's Nomad job specifications (HCL2), embedded so the binary carries exactly the
// files in this directory: the per-user sandbox template that the scheduler's Nomad driver fills with
// variables through Nomad's job-parse endpoint (so the reviewed file and what runs cannot drift), and the
// service jobs of the long-running roles, which operators run with `nomad job run -var …` or terraform/
// renders for every region (the files are Terraform templates too; terraform/README.md).
//
// Every spec is checked against a real Nomad agent (`nomad job validate`, `nomad job plan`) in this
// package's tests.
package jobs

import _ "embed"

var (
	// Sandbox is jobs/sandbox.nomad.hcl: one user's `warren runner` at one placement epoch. Required
	// variables: sandbox_id, issuer, user, epoch.
	//
	//go:embed sandbox.nomad.hcl
	Sandbox []byte

	// Edge is jobs/edge.nomad.hcl: the `warren edge` service.
	//
	//go:embed edge.nomad.hcl
	Edge []byte

	// Scheduler is jobs/scheduler.nomad.hcl: the `warren scheduler` service.
	//
	//go:embed scheduler.nomad.hcl
	Scheduler []byte

	// Billing is jobs/billing.nomad.hcl: the `warren billing` service.
	//
	//go:embed billing.nomad.hcl
	Billing []byte
)
