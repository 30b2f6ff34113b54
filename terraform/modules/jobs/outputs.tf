output "jobspecs" {
  description = "the region's jobspecs by role (edge, scheduler, billing), rendered from jobs_dir with templatefile"
  value       = { for r in local.roles : r => templatefile("${local.s.jobs_dir}/${r}.nomad.hcl", {}) }
}

output "vars" {
  description = "each job's HCL2 variables by role, typed as the job declares them"
  value       = local.vars
}

output "hcl2_vars" {
  description = "each job's HCL2 variables by role as nomad_job's hcl2.vars (and `nomad job run -var`) take them: strings as they are, anything else as its HCL (JSON) text"
  value = { for r, vs in local.vars : r => {
    for k, v in vs : k => can(tostring(v)) ? tostring(v) : jsonencode(v)
  } }
}

output "vault_policies" {
  description = "the Vault policy documents of the roles, by role"
  value       = local.policies
}

output "vault_names" {
  description = "the names of the roles' Vault policies and JWT roles, by role: warren-<region>-<role>"
  value       = local.vault_names
}

output "secrets_paths" {
  description = "where each role's secrets (db, scheduler_key) are written, by role: <kv_mount>/warren/regions/<region>/<role> (KV v2, the path `vault kv put` takes)"
  value       = { for r, rel in local.secrets_rel : r => "${local.s.kv_mount}/${rel}" }
}

output "webtransport_cert_path" {
  description = "where the edges' WebTransport certificate is written when Vault keeps it: vault kv put <path> cert=@fullchain.pem key=@key.pem (KV v2; the edges re-read it when it changes); null otherwise"
  value       = local.s.wt_vault ? "${local.s.kv_mount}/${local.wt_rel}" : null
}

output "consul_policies" {
  description = "the Consul ACL policy rules of the tokens edges, the scheduler and runners use with -consul, by role (edge, scheduler, runner)"
  value = { for role, kinds in local.consul_rules : role => join("", flatten([
    for kind, resources in kinds : [
      for name, policy in resources : "${kind} ${jsonencode(name)} {\n  policy = ${jsonencode(policy)}\n}\n"
    ]
  ])) }
}

output "runner_vault_policy" {
  description = "with task webhooks: the Vault policy of the sandbox jobs (warren-<region>-runner), reading the operator's webhook secret; null otherwise"
  value       = local.runner_policy
}
