output "region" {
  description = "the region: its public URL (edge_url, as GET /v1/regions lists it), snapshot bucket, where to write each role's secrets (secrets_paths: vault kv put <path> db=... scheduler_key=...), the roles' Vault policies and JWT roles (vault_names), its WebTransport URL (webtransport_url, null without WebTransport) and where its WebTransport certificate is written when Vault keeps it (webtransport_cert_path: vault kv put <path> cert=@fullchain.pem key=@key.pem) and its Nomad job ids by role (jobs)"
  value = {
    edge_url               = var.settings.public_url
    webtransport_url       = var.settings.wt_url == "" ? null : var.settings.wt_url
    webtransport_cert_path = module.jobs.webtransport_cert_path
    bucket                 = var.settings.bucket
    secrets_paths          = module.jobs.secrets_paths
    vault_names            = module.jobs.vault_names
    jobs                   = { for r, j in nomad_job.role : r => j.id }
  }
}
