output "edge_urls" {
  description = "each region's public edge URL by region, as GET /v1/regions on any edge lists them"
  value       = { for name, r in module.region : name => r.edge_url }
}

output "buckets" {
  description = "each region's snapshot bucket by region"
  value       = { for name, r in module.region : name => r.bucket }
}

output "secrets_paths" {
  description = "by region and role, where to write the role's secrets: vault kv put <path> db=<CockroachDB URL> scheduler_key=<key shared by the region's edges and scheduler> (billing: db only)"
  value       = { for name, r in module.region : name => r.secrets_paths }
}

output "jobs" {
  description = "the Nomad job ids by region and role"
  value       = { for name, r in module.region : name => r.jobs }
}
