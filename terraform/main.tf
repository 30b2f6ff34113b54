# Warren across regions from one `terraform apply`: the shared Vault configuration (the KV mount and the JWT
# auth method for Nomad workload identities) and, for every entry of var.regions, modules/region (its jobs,
# Vault policies and roles, Consul ACL policies). terraform/README.md says how to use it and how it is tested.

provider "nomad" {
  address = var.nomad_address
}

provider "consul" {
  address = var.consul_address
}

provider "vault" {
  address = var.vault_address
}

resource "vault_mount" "kv" {
  count = var.create_kv_mount ? 1 : 0

  path        = var.kv_mount
  type        = "kv"
  options     = { version = "2" }
  description = "Warren's secrets: issuer and admin keys, and each region's database URL and scheduler key"
}

resource "vault_jwt_auth_backend" "nomad" {
  count = var.vault_legacy_token ? 0 : 1

  path               = var.jwt_auth_path
  type               = "jwt"
  description        = "Nomad workload identities"
  jwks_url           = var.nomad_jwks_url
  jwt_supported_algs = ["RS256", "EdDSA"]

  lifecycle {
    precondition {
      condition     = var.nomad_jwks_url != ""
      error_message = "nomad_jwks_url is needed for workload identity (or set vault_legacy_token on Nomad 1.6)."
    }
  }
}

module "settings" {
  source = "./modules/settings"

  regions            = var.regions
  vault_address      = var.vault_address
  jobs_dir           = var.jobs_dir != "" ? var.jobs_dir : "${path.module}/../jobs"
  warren_binary      = var.warren_binary
  vault_legacy_token = var.vault_legacy_token
  kv_mount           = var.create_kv_mount ? vault_mount.kv[0].path : var.kv_mount
  nomad_role_path    = var.nomad_role_path
  mesh_pki_role      = var.mesh_pki_role
  mesh_pki_mount     = var.mesh_pki_mount
  webhook_secret     = var.task_webhooks ? var.webhook_secret_path : ""
  preview_domain     = var.preview_domain
}

module "region" {
  source   = "./modules/region"
  for_each = module.settings.regions

  settings      = each.value
  jwt_auth_path = var.vault_legacy_token ? var.jwt_auth_path : vault_jwt_auth_backend.nomad[0].path
  consul_acls   = var.consul_acls
}
