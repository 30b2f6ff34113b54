// Builds the Nomad agent/CLI used by the tests (not part of the warren module). See ../README.md.
module github.com/warren-mesh/warren/internal/tools/servers/nomad

go 1.26

require (
	github.com/hashicorp/nomad v1.6.1
	github.com/hashicorp/nomad/api v0.0.0-20240213164230-c364cb57298d
	github.com/mitchellh/cli v1.1.5
)

// Nomad's own replace lines (a dependency's replaces do not apply to the module that requires it).
replace (
	github.com/Microsoft/go-winio => github.com/endocrimes/go-winio v0.4.13-0.20190628114223-fb47a8b41948
	github.com/armon/go-metrics => github.com/armon/go-metrics v0.0.0-20230509193637-d9ca9af9f1f9
	github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-0.20201016140508-a07e7d50bbee
	golang.org/x/exp => golang.org/x/exp v0.0.0-20230321023759-10a507213a29
)
