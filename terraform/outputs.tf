output "edge_urls" {
  description = "each region's public edge URL by region, as GET /v1/regions on any edge lists them"
  value       = { for name, r in module.region : name => r.region.edge_url }
}

output "webtransport_urls" {
  description = "each region's public WebTransport URL by region (regions with webtransport only), as GET /v1/regions lists them next to the edge URLs"
  value       = { for name, r in module.region : name => r.region.webtransport_url if r.region.webtransport_url != null }
}

output "regions" {
  description = "by region: edge_url, webtransport_url (null without WebTransport), webtransport_cert_path (with a certificate kept in Vault: vault kv put <path> cert=@fullchain.pem key=@key.pem), bucket, secrets_paths (by role, where to write its secrets: vault kv put <path> db=<CockroachDB URL> scheduler_key=<key shared by the region's edges and scheduler>; billing: db only), vault_names (the roles' Vault policies and JWT roles) and jobs (the Nomad job ids by role)"
  value       = { for name, r in module.region : name => r.region }
}
