variable "nomad_address" {
  type        = string
  description = "a Nomad server (or agent) of the federation; each job's region selects its Nomad region, so one provider reaches them all"
}

variable "consul_address" {
  type        = string
  description = "the Consul agent the ACL policies are written to (the primary datacenter, with ACL replication to the regions' datacenters); only used with consul_acls"
  default     = "127.0.0.1:8500"
}

variable "consul_acls" {
  type        = bool
  description = "create the roles' Consul ACL policies (Consul with ACLs enabled)"
  default     = false
}

variable "vault_address" {
  type        = string
  description = "the Vault all regions share (issuer keys must verify in every region)"
}

variable "kv_mount" {
  type        = string
  description = "the KV v2 mount of Warren's secrets (the roles' -vault-mount; secret by default)"
  default     = "secret"
}

variable "task_webhooks" {
  type        = bool
  description = "the billing jobs render the operator's task webhook secret from webhook_secret_path and pass -webhook-secret-file (GET /v1/issuers/{iss}/webhook-secret), and their policy reads it; write the secret first (vault kv put <kv_mount>/<webhook_secret_path> secret=...): a job whose template names a missing secret does not start. Off (the default): no template, no flag, webhooks refused"
  default     = false
}

variable "webhook_secret_path" {
  type        = string
  description = "the KV v2 path in kv_mount of the operator's task webhook secret (key secret, at least 16 bytes), shared by every region's runners and billing jobs; used with task_webhooks"
  default     = "warren/webhook"
}

variable "preview_domain" {
  type        = string
  description = "the wildcard domain of preview URLs (docs/PROTOCOL.md#previews), e.g. preview.example.com: every region's edges get -preview-domain and make previews at https://<port>-<id>-<sig>.<preview_domain>/. The operator provides a wildcard DNS record *.<preview_domain> to the edges' load balancer(s) and a wildcard TLS certificate for it (terraform/README.md, \"Preview URLs\"). Empty (the default): previews off, the edges refuse to create them. A lower-case DNS name without scheme (checked in modules/settings)"
  default     = ""
}

variable "create_kv_mount" {
  type        = bool
  description = "create kv_mount (a KV v2 secrets engine); false when it exists already (e.g. Vault's dev mount secret/)"
  default     = true
}

variable "vault_legacy_token" {
  type        = bool
  description = "Nomad 1.6: the servers derive Vault tokens from their own (policies) instead of workload identity; no JWT auth method or roles are created"
  default     = false
}

variable "jwt_auth_path" {
  type        = string
  description = "the path of Vault's JWT auth method for Nomad workload identities (the Nomad agents' vault.jwt_auth_backend_path)"
  default     = "jwt-nomad"
}

variable "nomad_jwks_url" {
  type        = string
  description = "the Nomad servers' JWKS endpoint Vault verifies workload identities with, e.g. https://nomad.example.com:4646/.well-known/jwks.json"
  default     = ""
}

variable "jobs_dir" {
  type        = string
  description = "the directory of the job files; empty: this repository's jobs/"
  default     = ""
}

variable "warren_binary" {
  type        = string
  description = "where the warren binary is on the Nomad clients"
  default     = "/usr/local/bin/warren"
}

variable "nomad_role_path" {
  type        = string
  description = "Vault path minting the scheduler's Nomad token (a Nomad secrets engine role); empty: none (Nomad without ACLs)"
  default     = "nomad/creds/warren-scheduler"
}

variable "mesh_pki_mount" {
  type        = string
  description = "Vault PKI mount of the mesh certificates"
  default     = "pki"
}

variable "mesh_pki_role" {
  type        = string
  description = "Vault PKI role issuing the edges' mesh certificates (it must allow the URI SAN urn:warren:region:<region>); empty: no mesh"
  default     = ""
}

variable "regions" {
  description = "the Warren regions by name, each a Nomad region with its Consul datacenter, edges, scheduler and snapshot bucket; each region: public_url (required), bucket = { name (required), s3_region, endpoint, path_style }, and optionally datacenters, sandbox_datacenter, consul_datacenter, consul_addr, nomad_addr, vault_addr, driver, sandbox_driver, edge_count, billing_count, runner_args, webtransport = { url (required, https://host[:port]/wt), cert_file, key_file (PEM files on the edge nodes; both empty: the certificate from Vault) } (absent: no WebTransport) (modules/settings/variables.tf has the type, defaults and the checks)"
  type        = any
}
