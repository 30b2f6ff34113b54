variable "settings" {
  description = "the region's settings, as modules/settings derives them (modules/jobs checks their type)"
  type        = any
}

variable "jwt_auth_path" {
  type        = string
  description = "the path of Vault's JWT auth method trusting the Nomad servers' workload identities"
}

variable "consul_acls" {
  type        = bool
  description = "create the roles' Consul ACL policies"
}
