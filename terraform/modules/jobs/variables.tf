variable "settings" {
  description = "one region's settings, as modules/settings derives them"
  type = object({
    region             = string       # the Warren region: its Nomad region (the jobs' region) and its name in /v1/regions
    datacenters        = list(string) # the Nomad datacenters of the service jobs
    sandbox_datacenter = string       # the Nomad datacenter of the region's sandboxes
    consul_datacenter  = string
    public_url         = string # the region's public base URL (its load balancer), announced in GET /v1/regions
    jobs_dir           = string # the directory of edge.nomad.hcl, scheduler.nomad.hcl and billing.nomad.hcl
    warren_binary      = string
    driver             = string # task driver of the service jobs
    sandbox_driver     = string
    edge_count         = number
    billing_count      = number
    consul_addr        = string # each node's Consul agent
    nomad_addr         = string # each node's Nomad agent, for the scheduler
    vault_addr         = string
    vault_legacy_token = bool   # Nomad 1.6: Vault tokens derived by the servers (policies) instead of workload identity (roles)
    kv_mount           = string # the KV v2 mount of Warren's secrets
    nomad_role_path    = string # Vault path minting the scheduler's Nomad token; empty: none (Nomad without ACLs)
    webhook_secret     = string # KV v2 path in kv_mount of the operator's task webhook secret; empty: webhooks off
    preview_domain     = string # the wildcard domain of preview URLs (the edges' -preview-domain); empty: previews off
    mesh_pki_role      = string # Vault PKI role of the mesh certificates; empty: no mesh
    mesh_pki_mount     = string
    bucket = object({ # the region's snapshot bucket
      name       = string
      s3_region  = string
      endpoint   = string
      path_style = bool
    })
    other_buckets = map(object({ # the other regions' buckets by region, which the region's runners read to resume
      name       = string
      s3_region  = string
      endpoint   = string
      path_style = bool
    }))
    runner_args  = list(string) # further flags for every runner
    wt_url       = string       # the public WebTransport URL; empty: no WebTransport
    wt_cert_file = string       # the WebTransport certificate and key as PEM files on the edge nodes, or
    wt_key_file  = string       # empty with wt_vault
    wt_vault     = bool         # the WebTransport certificate and key from Vault (webtransport_cert_path)
  })
}
