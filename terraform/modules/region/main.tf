# One Warren region: its edge, scheduler and billing jobs in its Nomad region (the jobs' region selects it
# through the one federated nomad provider), the roles' Vault policies and JWT auth roles for Nomad workload
# identity, and (with consul_acls) the roles' Consul ACL policies in its datacenter.

module "jobs" {
  source   = "../jobs"
  settings = var.settings
}

locals {
  roles = toset(["edge", "scheduler", "billing"])
  # The JWT roles by task: the service jobs', and with task webhooks the sandbox jobs' (task runner), whose
  # job ids are sandbox-<id>-e<epoch>, hence the glob; only the scheduler submits such jobs (its Nomad token).
  jwt_roles = { for task, r in merge({ for r in local.roles : r => { job = "warren-${r}", glob = false } }, {
    runner = { job = "sandbox-*", glob = true }
  }) : task => r if task != "runner" || module.jobs.runner_vault_policy != null }
}

resource "vault_policy" "role" {
  for_each = local.roles

  name   = module.jobs.vault_names[each.key]
  policy = module.jobs.vault_policies[each.key]
}

# Nomad 1.7 and later: each job's task logs in with its vault_default workload identity (audience vault.io)
# for a token of its role. The claims name the job, not the region (Nomad's workload identities carry none),
# so the roles of two regions accept each other's identities unless each region's servers sign with their
# own issuer and auth method (terraform/README.md, "Known limits").
resource "vault_jwt_auth_backend_role" "role" {
  for_each = { for task, r in local.jwt_roles : task => r if !var.settings.vault_legacy_token }

  backend           = var.jwt_auth_path
  role_name         = "warren-${var.settings.region}-${each.key}"
  role_type         = "jwt"
  bound_audiences   = ["vault.io"]
  bound_claims_type = each.value.glob ? "glob" : "string"
  bound_claims = {
    nomad_namespace = "default"
    nomad_job_id    = each.value.job
    nomad_task      = each.key
  }
  user_claim              = "/nomad_job_id"
  user_claim_json_pointer = true
  claim_mappings = {
    nomad_namespace = "nomad_namespace"
    nomad_job_id    = "nomad_job_id"
    nomad_task      = "nomad_task"
  }
  token_type     = "service"
  token_policies = ["warren-${var.settings.region}-${each.key}"]
  token_period   = 1800

  depends_on = [vault_policy.role, vault_policy.runner]
}

# With task webhooks: the sandbox jobs' policy (the scheduler passes -runner-vault-role warren-<region>-runner).
resource "vault_policy" "runner" {
  count = module.jobs.runner_vault_policy == null ? 0 : 1

  name   = "warren-${var.settings.region}-runner"
  policy = module.jobs.runner_vault_policy
}

resource "nomad_job" "role" {
  for_each = local.roles

  jobspec = module.jobs.jobspecs[each.key]
  hcl2 {
    vars = module.jobs.hcl2_vars[each.key]
  }
  # Wait for each deployment; the jobs' update blocks revert a failed one.
  detach           = false
  purge_on_destroy = true

  # The tasks' Vault policies and roles exist before they log in.
  depends_on = [vault_policy.role, vault_jwt_auth_backend_role.role, vault_policy.runner]
}

# Consul ACL policies of the tokens edges, the scheduler and runners use with -consul (edge, scheduler, runner;
# modules/jobs renders them), valid in the region's datacenter.
resource "consul_acl_policy" "role" {
  for_each = var.consul_acls ? module.jobs.consul_policies : {}

  name        = "warren-${var.settings.region}-${each.key}"
  datacenters = [var.settings.consul_datacenter]
  rules       = each.value
}
