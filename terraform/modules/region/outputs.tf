output "edge_url" {
  description = "the region's public URL, as GET /v1/regions lists it"
  value       = var.settings.public_url
}

output "bucket" {
  description = "the region's snapshot bucket"
  value       = var.settings.bucket
}

output "secrets_paths" {
  description = "where to write each role's secrets (vault kv put <path> db=... scheduler_key=...)"
  value       = module.jobs.secrets_paths
}

output "vault_names" {
  description = "the roles' Vault policies and JWT roles"
  value       = module.jobs.vault_names
}

output "jobs" {
  description = "the region's Nomad job ids by role"
  value       = { for r, j in nomad_job.role : r => j.id }
}
