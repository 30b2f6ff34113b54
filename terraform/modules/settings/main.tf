# Checks the map of regions (plan-time validation) and derives each region's settings for modules/jobs and
# modules/region: defaults filled in, the tasks' Vault address, and every other region's snapshot bucket. No
# providers: the tests of terraform/ render it with real Terraform (terraform/README.md).

output "regions" {
  description = "each region's settings by region, as modules/jobs takes them"
  value = { for name, r in var.regions : name => {
    region             = name
    datacenters        = r.datacenters
    sandbox_datacenter = r.sandbox_datacenter
    consul_datacenter  = r.consul_datacenter
    public_url         = trimsuffix(r.public_url, "/")
    jobs_dir           = var.jobs_dir
    warren_binary      = var.warren_binary
    driver             = r.driver
    sandbox_driver     = r.sandbox_driver
    edge_count         = r.edge_count
    billing_count      = r.billing_count
    consul_addr        = r.consul_addr
    nomad_addr         = r.nomad_addr
    vault_addr         = coalesce(r.vault_addr, var.vault_address)
    vault_legacy_token = var.vault_legacy_token
    kv_mount           = var.kv_mount
    nomad_role_path    = var.nomad_role_path
    webhook_secret     = var.webhook_secret
    mesh_pki_role      = var.mesh_pki_role
    mesh_pki_mount     = var.mesh_pki_mount
    preview_domain     = var.preview_domain
    bucket             = r.bucket
    other_buckets      = { for other, o in var.regions : other => o.bucket if other != name }
    runner_args        = r.runner_args
    wt_url             = r.webtransport == null ? "" : r.webtransport.url
    wt_cert_file       = r.webtransport == null ? "" : r.webtransport.cert_file
    wt_key_file        = r.webtransport == null ? "" : r.webtransport.key_file
    wt_vault           = r.webtransport == null ? false : r.webtransport.cert_file == ""
  } }
}
