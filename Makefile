# Warren. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin/warren
# Tools the tests need are cached outside the repo.
TOOLS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/warren/tools
FUZZTIME  ?= 10s
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The Go module proxy is the one `go env GOPROXY` names (GOPROXY, go env -w, the toolchain's default), without a
# `,direct` fallback: that would try VCS hosts a build machine may not reach.
export GOPROXY := $(shell p=$$($(GO) env GOPROXY); echo "$${p%%,direct*}")

.PHONY: help dev build test test-short fuzz lint bench load fmt tools servers bwrap claude-code postgres staticcheck terraform jwt-libs sdk-js chromium clean

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-z-]+:.*## /{printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

dev: bwrap claude-code build ## run the whole platform on this machine (warren dev, embedded defaults: the edge and playground on 127.0.0.1:8080, preview URLs on 127.0.0.1:8081)
	$(BIN) dev

# Release builds carry no symbol table, no DWARF and no local paths (74.1 MB → 52.1 MB); panics and
# `warren version` work as before. `make build BUILDFLAGS=` keeps symbols and DWARF for a debugger (dlv).
BUILDFLAGS ?= -trimpath -ldflags='-s -w'

build: sdk-js ## build the stripped warren binary into bin/ (with the TypeScript SDK's browser build the dev playground embeds; BUILDFLAGS= for a debugger's)
	$(GO) build $(BUILDFLAGS) -o $(BIN) ./cmd/warren

# The Terraform provider is warren itself: this lays out a filesystem mirror holding bin/warren as
# registry.terraform.io/warren/warren and writes $(TF_MIRROR)/warren.tfrc for TF_CLI_CONFIG_FILE.
TF_MIRROR ?= bin/terraform-mirror
.PHONY: terraform-provider
terraform-provider: build ## install Warren's Terraform provider into a filesystem mirror (TF_MIRROR, default bin/terraform-mirror)
	$(BIN) terraform-provider -install $(TF_MIRROR)

test: tools ## install what the tests need, lint, run every test and a short fuzz pass
	$(MAKE) --no-print-directory lint
	$(GO) test -count=1 -timeout 25m ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME)

test-short: ## unit tests only (no bubblewrap, no real servers)
	$(GO) test -short -count=1 ./...

fuzz: ## run every fuzz target for FUZZTIME each (default 10s; see internal/tools/fuzz.sh)
	@GO=$(GO) internal/tools/fuzz.sh $(FUZZTIME)

# Import groups: standard library, other modules, then this module (internal/tools/importgroups). Not checked:
# the server wrappers (internal/tools/servers: modules of their own whose builds are keyed on their source).
IMPORTGROUPS_FILES = git ls-files '*.go' ':!internal/tools/servers'

# Commit messages since COMMITS_BASE (the rule's first day; history before it stays): "area: summary" of at
# most 72 characters, a blank line before the body (internal/tools/commitsubjects).
COMMITS_BASE := d9eac01

lint: staticcheck ## gofmt, import groups, commit subjects, go mod tidy, go vet and staticcheck: any finding fails
	@files=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$files" ] || { echo "gofmt -l (run make fmt):"; echo "$$files"; exit 1; }
	@$(GO) run ./internal/tools/importgroups -module $$($(GO) list -m) $$($(IMPORTGROUPS_FILES))
	@$(GO) run ./internal/tools/commitsubjects $(COMMITS_BASE)
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(STATICCHECK) ./...

bench: ## micro-benchmarks of hot paths
	$(GO) test -run='^$$' -bench=. -benchmem ./...

load: tools build ## end-to-end load tool: sandbox start latency, exec round trips, runner RSS, first agent event
	$(BIN) bench -users 50 -turns 20 -first-events 20

fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

CLAUDE_CODE_VERSION := $(shell sed -n 's/^const ClaudeCodeVersion = "\(.*\)"/\1/p' internal/tools/tools.go)
CLAUDE_CLI := $(TOOLS_DIR)/claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude

tools: bwrap claude-code postgres servers staticcheck terraform jwt-libs sdk-js chromium ## install what the tests need (idempotent; cache under ~/.cache/warren/tools, the TypeScript SDK's npm packages in sdk/js/node_modules)

STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(TOOLS_DIR)/bin/staticcheck

staticcheck: ## install the pinned staticcheck from the Go module proxy into the tools cache
	@if [ -x "$(STATICCHECK)" ] && "$(STATICCHECK)" -version 2>/dev/null | grep -q "($(STATICCHECK_VERSION:v%=%))"; then \
	  echo "staticcheck: $(STATICCHECK_VERSION) (cached)"; \
	else \
	  GOBIN=$(TOOLS_DIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) && "$(STATICCHECK)" -version; \
	fi

TERRAFORM_VERSION := $(shell sed -n 's/^const TerraformVersion = "\(.*\)"/\1/p' internal/tools/tools.go)
TERRAFORM := $(TOOLS_DIR)/bin/terraform

# Terraform $(TERRAFORM_VERSION), the last MPL-licensed release, for the tests of terraform/ (internal/tools).
terraform: ## install Terraform (the last MPL release, pinned in internal/tools) from the Go module proxy into the tools cache
	@if [ -x "$(TERRAFORM)" ] && [ "$$(CHECKPOINT_DISABLE=1 "$(TERRAFORM)" version 2>/dev/null | head -1)" = "Terraform v$(TERRAFORM_VERSION)" ]; then \
	  echo "terraform: $(TERRAFORM_VERSION) (cached)"; \
	else \
	  GOBIN=$(TOOLS_DIR)/bin $(GO) install github.com/hashicorp/terraform@v$(TERRAFORM_VERSION) && CHECKPOINT_DISABLE=1 "$(TERRAFORM)" version | head -1; \
	fi

# Nomad, Consul and Vault build from small wrapper modules (internal/tools/servers, README there), versitygw
# (the S3 server) with go install; in parallel, each a no-op when its inputs are unchanged.
servers: ## build Nomad, Consul, Vault and versitygw for the tests into the tools cache
	@TOOLS_DIR=$(TOOLS_DIR) bash -c 'set -e; pids=(); for s in nomad consul vault versitygw; do \
	  internal/tools/servers/build.sh $$s & pids+=($$!); done; rc=0; for p in $${pids[@]}; do wait $$p || rc=1; done; exit $$rc'

claude-code: ## install the pinned Claude Code CLI with npm into the tools cache
	@if [ -x "$(CLAUDE_CLI)" ] && "$(CLAUDE_CLI)" --version 2>/dev/null | grep -q "^$(CLAUDE_CODE_VERSION) "; then \
	  echo "claude-code: $(CLAUDE_CODE_VERSION) (cached)"; \
	else \
	  command -v npm >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq npm; }; \
	  mkdir -p $(TOOLS_DIR)/claude-code && \
	  npm install --no-audit --no-fund --loglevel=error --prefix $(TOOLS_DIR)/claude-code @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) && \
	  "$(CLAUDE_CLI)" --version; \
	fi

JSONWEBTOKEN_VERSION := $(shell sed -n 's/^const JSONWebTokenVersion = "\(.*\)"/\1/p' internal/tools/tools.go)
JWT_NODE_DIR := $(TOOLS_DIR)/jwt-node

# The token interop tests (internal/token) mint tokens as customers' backends do: jsonwebtoken from npm into
# the tools cache (never the repo), PyJWT from Debian for the system python3 (/usr/bin/python3).
jwt-libs: ## install JWT libraries of other languages for the token interop tests: jsonwebtoken (npm), PyJWT (Debian python3-jwt)
	@if [ "$$(node -p "require('$(JWT_NODE_DIR)/node_modules/jsonwebtoken/package.json').version" 2>/dev/null)" = "$(JSONWEBTOKEN_VERSION)" ]; then \
	  echo "jsonwebtoken: $(JSONWEBTOKEN_VERSION) (cached)"; \
	else \
	  command -v npm >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq npm; }; \
	  mkdir -p $(JWT_NODE_DIR) && \
	  npm install --no-audit --no-fund --loglevel=error --prefix $(JWT_NODE_DIR) jsonwebtoken@$(JSONWEBTOKEN_VERSION) && \
	  echo "jsonwebtoken: $$(node -p "require('$(JWT_NODE_DIR)/node_modules/jsonwebtoken/package.json').version")"; \
	fi
	@/usr/bin/python3 -c 'import jwt' 2>/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-jwt; }
	@echo "PyJWT: $$(/usr/bin/python3 -c 'import jwt; print(jwt.__version__)')"

# The TypeScript SDK's npm packages (typescript, ws and their types, pinned by sdk/js/package-lock.json) go
# into sdk/js/node_modules (gitignored); internal/devstack's TestTypeScriptSDK builds it and runs its tests.
sdk-js: ## install the TypeScript SDK's npm packages (sdk/js/package-lock.json), build it into sdk/js/dist and copy its browser build into internal/playground/sdk (embedded by warren dev's playground)
	@command -v npm >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq npm; }
	@cd sdk/js && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error; } && \
	  node node_modules/typescript/bin/tsc -p . && echo "sdk/js: built with TypeScript $$(node -p "require('./node_modules/typescript/package.json').version")"
	@rm -f internal/playground/sdk/*.js && cp sdk/js/dist/src/*.js internal/playground/sdk/ && rm -f internal/playground/sdk/token.js

chromium: ## install Chromium from Debian if missing (the TypeScript SDK's browser test drives it headless)
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }
	@chromium --version

postgres: ## install PostgreSQL (the CockroachDB wire stand-in for tests) from Debian if missing
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq postgresql; }
	@echo "postgres: $$( (command -v initdb || ls /usr/lib/postgresql/*/bin/initdb) | head -1)"

bwrap: ## install the sandbox's parts from Debian if missing: bubblewrap, pasta (passt), util-linux (+ ip, perl, python3, cc for the isolation tests)
	@command -v bwrap >/dev/null && command -v pasta >/dev/null && command -v nsenter >/dev/null && \
	  command -v ip >/dev/null && command -v perl >/dev/null && command -v python3 >/dev/null && command -v cc >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq bubblewrap passt util-linux iproute2 perl python3 gcc; }
	@# pasta (-sandbox-network=pasta) runs as each sandbox's unprivileged uid and opens /dev/net/tun: the Linux default mode is 0666.
	@[ "$$(stat -c %a /dev/net/tun 2>/dev/null)" = 666 ] || $(SUDO) chmod 0666 /dev/net/tun
	@command -v bwrap >/dev/null && echo "bubblewrap: $$(bwrap --version), pasta: $$(command -v pasta)"

clean: ## remove build outputs (not the data dir)
	rm -rf bin sdk/js/dist internal/playground/sdk/*.js
