# The region's settings; what each means is described in ../jobs/variables.tf and ../../variables.tf.

variable "region" {
  type = string
}

variable "datacenters" {
  type = list(string)
}

variable "sandbox_datacenter" {
  type = string
}

variable "public_url" {
  type = string
}

variable "jobs_dir" {
  type = string
}

variable "warren_binary" {
  type = string
}

variable "driver" {
  type = string
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
  type = string
}

variable "nomad_addr" {
  type = string
}

variable "vault_addr" {
  type = string
}

variable "vault_legacy_token" {
  type = bool
}

variable "kv_mount" {
  type = string
}

variable "jwt_auth_path" {
  type        = string
  description = "the path of Vault's JWT auth method trusting the Nomad servers' workload identities"
}

variable "nomad_role_path" {
  type = string
}

variable "mesh_pki_role" {
  type = string
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
}

variable "other_buckets" {
  type = map(object({
    name       = string
    s3_region  = string
    endpoint   = string
    path_style = bool
  }))
}

variable "runner_args" {
  type = list(string)
}

variable "consul_datacenter" {
  type        = string
  description = "the region's Consul datacenter"
}

variable "consul_acls" {
  type        = bool
  description = "create the roles' Consul ACL policies"
}
