// Builds the Consul agent used by the tests (not part of the warren module). See ../README.md.
module github.com/warren-mesh/warren/internal/tools/servers/consul

go 1.26

require (
	github.com/hashicorp/consul v1.16.3
	github.com/mitchellh/cli v1.1.4
)
