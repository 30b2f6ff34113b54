// Builds the Vault server used by the tests (not part of the warren module). See ../README.md.
// `make tools` builds it from a copy in the tools cache whose go.mod gains
// `replace github.com/hashicorp/vault/sdk => <cache>/vault-sdk-patched` (see ../build.sh).
module github.com/warren-mesh/warren/internal/tools/servers/vault

go 1.26

require github.com/hashicorp/vault v1.14.2
