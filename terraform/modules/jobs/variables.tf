variable "region" {
  type        = string
  description = "the Warren region: its Nomad region (the jobs' region), and its name in /v1/regions"
}

variable "datacenters" {
  type        = list(string)
  description = "the region's Nomad datacenters the service jobs run in"
}

variable "sandbox_datacenter" {
  type        = string
  description = "the Nomad datacenter of the region's sandboxes"
}

variable "public_url" {
  type        = string
  description = "the region's public base URL (its load balancer), announced in GET /v1/regions"
}

variable "jobs_dir" {
  type        = string
  description = "the directory holding edge.nomad.hcl, scheduler.nomad.hcl and billing.nomad.hcl"
}

variable "warren_binary" {
  type = string
}

variable "driver" {
  type        = string
  description = "task driver of the service jobs"
}

variable "sandbox_driver" {
  type = string
}

variable "edge_count" {
  type = number
}

variable "billing_count" {
  type = number
}

variable "consul_addr" {
  type        = string
  description = "each node's Consul agent"
}

variable "nomad_addr" {
  type        = string
  description = "each node's Nomad agent, for the scheduler"
}

variable "vault_addr" {
  type = string
}

variable "vault_legacy_token" {
  type        = bool
  description = "Nomad 1.6: Vault tokens derived by the servers (policies) instead of workload identity (roles)"
}

variable "kv_mount" {
  type        = string
  description = "the KV v2 mount of Warren's secrets"
}

variable "nomad_role_path" {
  type        = string
  description = "Vault path minting the scheduler's Nomad token; empty: none (Nomad without ACLs)"
}

variable "mesh_pki_role" {
  type        = string
  description = "Vault PKI role of the mesh certificates; empty: no mesh"
}

variable "mesh_pki_mount" {
  type = string
}

variable "bucket" {
  type = object({
    name       = string
    s3_region  = string
    endpoint   = string
    path_style = bool
  })
  description = "the region's snapshot bucket"
}

variable "other_buckets" {
  type = map(object({
    name       = string
    s3_region  = string
    endpoint   = string
    path_style = bool
  }))
  description = "the other regions' snapshot buckets by region, which the region's runners read to resume"
}

variable "runner_args" {
  type        = list(string)
  description = "further flags for every runner"
}
