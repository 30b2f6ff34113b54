# Renders one region's Nomad jobs (edge, scheduler, billing) from the repository's jobs/*.nomad.hcl, and the
# Vault policies of the roles. It has no providers and creates nothing: modules/region applies what it renders,
# and the tests of terraform/ render it with real Terraform and run the jobs on real Nomad (terraform/README.md).
#
# The job files are Nomad jobspecs and Terraform templates at once: they write every Nomad runtime
# interpolation as $${...} (a literal ${...} to both), so templatefile renders them to the jobspec Nomad would
# read from the file itself, and the region's settings reach them as the jobs' own HCL2 variables (hcl2.vars
# of nomad_job; `nomad job run -var` by hand), so the file and the variables are the same whichever way a job
# is run.

locals {
  s     = var.settings
  roles = ["edge", "scheduler", "billing"]

  # The region's secrets (db, scheduler_key) live at <kv_mount>/warren/regions/<region>/<role>; issuer and
  # admin keys at <kv_mount>/warren/{issuers/*,admin}, shared by all regions (internal/secrets/vault).
  secrets_rel = { for r in local.roles : r => "warren/regions/${local.s.region}/${r}" }
  vault_names = { for r in local.roles : r => "warren-${local.s.region}-${r}" }
  # The edges' WebTransport certificate (cert, key), when kept in Vault.
  wt_rel = "warren/regions/${local.s.region}/webtransport"

  # -s3-* of the region's own bucket and -snapshot-region of every other region's, for every runner.
  s3_args = concat(
    ["-s3-bucket=${local.s.bucket.name}", "-s3-region=${local.s.bucket.s3_region}"],
    local.s.bucket.endpoint == "" ? [] : ["-s3-endpoint=${local.s.bucket.endpoint}"],
    local.s.bucket.path_style ? ["-s3-path-style"] : [],
  )
  snapshot_region_args = [
    for name, b in local.s.other_buckets :
    "-snapshot-region=${name}=s3://${b.name}?${join("&", concat(
      ["region=${b.s3_region}"],
      b.endpoint == "" ? [] : ["endpoint=${urlencode(b.endpoint)}"],
      b.path_style ? ["path-style=true"] : [],
    ))}"
  ]

  common = {
    region             = local.s.region
    datacenters        = local.s.datacenters
    warren_binary      = local.s.warren_binary
    driver             = local.s.driver
    vault_legacy_token = local.s.vault_legacy_token
  }

  # Each job's variables, typed as its variable blocks declare them.
  vars = {
    edge = merge(local.common, {
      count          = local.s.edge_count
      public_url     = local.s.public_url
      consul_addr    = local.s.consul_addr
      vault_addr     = local.s.vault_addr
      vault_role     = local.vault_names.edge
      vault_policies = [local.vault_names.edge]
      secrets_path   = "${local.s.kv_mount}/data/${local.secrets_rel.edge}"
      mesh_pki_role  = local.s.mesh_pki_role
      mesh_pki_mount = local.s.mesh_pki_mount
      wt_url         = local.s.wt_url
      wt_cert_file   = local.s.wt_cert_file
      wt_key_file    = local.s.wt_key_file
      wt_cert_secret = local.s.wt_vault ? "${local.s.kv_mount}/data/${local.wt_rel}" : ""
      preview_domain = local.s.preview_domain
    })
    scheduler = merge(local.common, {
      consul_addr        = local.s.consul_addr
      nomad_addr         = local.s.nomad_addr
      sandbox_datacenter = local.s.sandbox_datacenter
      sandbox_driver     = local.s.sandbox_driver
      runner_args        = concat(local.s3_args, local.snapshot_region_args, local.s.runner_args)
      vault_role         = local.vault_names.scheduler
      vault_policies     = [local.vault_names.scheduler]
      secrets_path       = "${local.s.kv_mount}/data/${local.secrets_rel.scheduler}"
      nomad_role_path    = local.s.nomad_role_path
      # Every sandbox job renders the operator's task webhook secret, logging in as the region's runner role.
      runner_webhook_secret_path = local.s.webhook_secret == "" ? "" : "${local.s.kv_mount}/data/${local.s.webhook_secret}"
      runner_vault_role          = "warren-${local.s.region}-runner"
    })
    billing = merge(local.common, {
      count          = local.s.billing_count
      vault_addr     = local.s.vault_addr
      vault_role     = local.vault_names.billing
      vault_policies = [local.vault_names.billing]
      secrets_path   = "${local.s.kv_mount}/data/${local.secrets_rel.billing}"
      # The operator's task webhook secret, for GET /v1/issuers/{iss}/webhook-secret; "": none.
      webhook_secret_path = local.s.webhook_secret == "" ? "" : "${local.s.kv_mount}/data/${local.s.webhook_secret}"
    })
  }

  # Vault policies, what internal/secrets/vault and internal/mesh do and no more: each role reads its region's
  # secrets; the edge reads issuer keys (versions and metadata), issues mesh certificates and reads its
  # WebTransport certificate (its job's templates); the billing role
  # writes issuer keys (new versions, check-and-set) and the admin key; the scheduler mints its Nomad token.
  read_own = { for r in local.roles : r => <<-EOT
    path "${local.s.kv_mount}/data/${local.secrets_rel[r]}" {
      capabilities = ["read"]
    }
  EOT
  }
  policies = {
    edge = join("", [local.read_own.edge, <<-EOT
      path "${local.s.kv_mount}/data/warren/issuers/*" {
        capabilities = ["read"]
      }
      path "${local.s.kv_mount}/metadata/warren/issuers/*" {
        capabilities = ["read"]
      }
    EOT
      , local.s.mesh_pki_role == "" ? "" : <<-EOT
      path "${local.s.mesh_pki_mount}/issue/${local.s.mesh_pki_role}" {
        capabilities = ["update"]
      }
    EOT
      , !local.s.wt_vault ? "" : <<-EOT
      path "${local.s.kv_mount}/data/${local.wt_rel}" {
        capabilities = ["read"]
      }
    EOT
    ])
    scheduler = join("", [local.read_own.scheduler, local.s.nomad_role_path == "" ? "" : <<-EOT
      path "${local.s.nomad_role_path}" {
        capabilities = ["read"]
      }
    EOT
    ])
    billing = join("", [local.read_own.billing, <<-EOT
      path "${local.s.kv_mount}/data/warren/issuers/*" {
        capabilities = ["create", "read", "update"]
      }
      path "${local.s.kv_mount}/metadata/warren/issuers/*" {
        capabilities = ["read"]
      }
      path "${local.s.kv_mount}/data/warren/admin" {
        capabilities = ["create", "read", "update"]
      }
      path "${local.s.kv_mount}/metadata/warren/admin" {
        capabilities = ["read"]
      }
    EOT
      , local.s.webhook_secret == "" ? "" : <<-EOT
      path "${local.s.kv_mount}/data/${local.s.webhook_secret}" {
        capabilities = ["read"]
      }
    EOT
    ])
  }

  # The runners (sandbox jobs) read the operator's task webhook secret and nothing else, when webhooks are on.
  runner_policy = local.s.webhook_secret == "" ? null : <<-EOT
    path "${local.s.kv_mount}/data/${local.s.webhook_secret}" {
      capabilities = ["read"]
    }
  EOT

  # Consul ACL rules of the tokens the processes use with -consul (Nomad registers the services with its own):
  # the edge reads the owners (each user's runner and its key); the scheduler also claims warm runners and
  # clears owners; runners hold their owner or warm keys with sessions and register themselves. Every role
  # reads the nodes (sessions are bound to a node's health). The billing role uses no Consul. By role: rule
  # kind => resource => policy.
  consul_rules = { for role, rules in {
    edge      = { key_prefix = { "warren/owners/" = "read" } }
    scheduler = { key_prefix = { "warren/" = "write" }, session_prefix = { "" = "write" } }
    runner    = { key_prefix = { "warren/" = "write" }, session_prefix = { "" = "write" }, service = { "warren-runner" = "write" } }
  } : role => merge(rules, { node_prefix = { "" = "read" } }) }
}
