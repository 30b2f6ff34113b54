#!/usr/bin/env bash
# Builds one of the servers the tests run (nomad, consul, vault, versitygw) into $TOOLS_DIR/bin, from the
# small wrapper modules next to this script (see README.md). A re-run with unchanged inputs is a no-op.
set -euo pipefail
name=$1
here=$(cd "$(dirname "$0")" && pwd)
tools=${TOOLS_DIR:?TOOLS_DIR must be set}
bin=$tools/bin/$name
stamp=$tools/bin/$name.stamp
mkdir -p "$tools/bin" "$tools/src"
# The module proxy only: `,direct` would try VCS hosts this machine cannot reach.
GOPROXY=$(go env GOPROXY); export GOPROXY=${GOPROXY%%,direct*} GOFLAGS=-mod=mod GOTOOLCHAIN=local

versitygw_version=v1.8.0
if [ "$name" = versitygw ]; then
  want="versitygw $versitygw_version $(go env GOVERSION)"
else
  want="$(cat "$here/build.sh" "$here/$name"/go.mod "$here/$name"/go.sum "$here/$name"/*.go 2>/dev/null | sha256sum | cut -c1-16) $(go env GOVERSION)"
fi
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$name: cached ($bin)"; exit 0
fi
start=$(date +%s)
case $name in
versitygw)
  GOBIN=$tools/bin go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version" ;;
nomad|consul|vault)
  src=$tools/src/$name
  rm -rf "$src"; cp -r "$here/$name" "$src"; chmod -R u+w "$src"
  if [ "$name" = consul ]; then
    # The checksum database lacks two of Consul's dependencies; go.sum pins them instead.
    export GONOSUMDB=github.com/hashicorp/hcp-sdk-go,github.com/hashicorp/consul
  fi
  if [ "$name" = vault ]; then
    # Vault 1.14.2's dev server panics at start (hashicorp/vault#22173: a managed-keys path defines a
    # CreateOperation without an ExistenceCheck, and sdk v0.9.2 panics on that). Build against a private
    # copy of the sdk with that one start-up check disabled; nothing else changes.
    sdk=$(cd "$src" && go mod download -json github.com/hashicorp/vault/sdk@v0.9.2 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    rm -rf "$tools/src/vault-sdk"; cp -r "$sdk" "$tools/src/vault-sdk"; chmod -R u+w "$tools/src/vault-sdk"
    sed -i 's/^\t\tif p.ExistenceCheck == nil {$/\t\tif false \&\& p.ExistenceCheck == nil { \/\/ warren: hashicorp\/vault#22173/' \
      "$tools/src/vault-sdk/framework/backend.go"
    grep -q 'warren: hashicorp/vault#22173' "$tools/src/vault-sdk/framework/backend.go" || { echo "vault sdk patch did not apply" >&2; exit 1; }
    (cd "$src" && go mod edit -replace "github.com/hashicorp/vault/sdk=$tools/src/vault-sdk")
  fi
  (cd "$src" && go build -trimpath -o "$bin.tmp" . && mv "$bin.tmp" "$bin") ;;
*) echo "unknown server $name" >&2; exit 2 ;;
esac
echo "$want" > "$stamp"
echo "$name: built in $(( $(date +%s) - start ))s ($bin)"
