variable "regions" {
  description = "the Warren regions by name, each a Nomad region with its Consul datacenter, edges, scheduler and snapshot bucket (see ../../variables.tf)"
  type = map(object({
    public_url         = string                          # the region's load balancer: GET /v1/regions lists it
    datacenters        = optional(list(string), ["dc1"]) # Nomad datacenters of the service jobs
    sandbox_datacenter = optional(string, "dc1")         # Nomad datacenter of the sandboxes
    consul_datacenter  = optional(string, "dc1")
    consul_addr        = optional(string, "127.0.0.1:8500") # each node's Consul agent
    nomad_addr         = optional(string, "http://127.0.0.1:4646")
    vault_addr         = optional(string) # as the region's tasks reach Vault; default vault_address
    driver             = optional(string, "exec")
    sandbox_driver     = optional(string, "exec")
    edge_count         = optional(number, 2)
    billing_count      = optional(number, 2)
    runner_args        = optional(list(string), [])
    webtransport = optional(object({   # absent: no WebTransport (the edges serve the WebSocket alone)
      url       = string               # the region's public WebTransport URL, https://host[:port]/wt, announced in GET /v1/regions
      cert_file = optional(string, "") # with key_file: PEM files on the edge nodes; empty: from Vault, <kv_mount>/warren/regions/<region>/webtransport (cert, key)
      key_file  = optional(string, "")
    }))
    bucket = object({
      name       = string
      s3_region  = optional(string, "us-east-1")
      endpoint   = optional(string, "") # empty: AWS
      path_style = optional(bool, false)
    })
  }))

  validation {
    condition     = length(var.regions) > 0 && alltrue([for name, _ in var.regions : can(regex("^[a-z0-9][a-z0-9-]{0,62}$", name))])
    error_message = "regions must name at least one region, each lower-case letters, digits and '-' (a Nomad region name)."
  }
  validation {
    condition     = alltrue([for _, r in var.regions : can(regex("^https?://[^/?#@]+$", trimsuffix(r.public_url, "/")))])
    error_message = "every region's public_url must be an http:// or https:// URL of a host (and port), without path, query or user."
  }
  validation {
    condition     = alltrue([for _, r in var.regions : r.edge_count >= 1 && r.billing_count >= 1 && floor(r.edge_count) == r.edge_count && floor(r.billing_count) == r.billing_count])
    error_message = "edge_count and billing_count must be whole numbers of at least 1."
  }
  validation {
    condition     = alltrue([for _, r in var.regions : r.webtransport == null ? true : can(regex("^https://[^/?#@]+(/[^?#]*)?$", r.webtransport.url))])
    error_message = "every region's webtransport.url must be an https:// URL of a host (and port) and path (WebTransport is HTTP/3: TLS always), without query or user."
  }
  validation {
    condition     = alltrue([for _, r in var.regions : r.webtransport == null ? true : (r.webtransport.cert_file == "") == (r.webtransport.key_file == "")])
    error_message = "webtransport.cert_file and webtransport.key_file go together (both empty: the certificate comes from Vault)."
  }
  # Production sandboxes have a network of their own (the runner's default, -sandbox-network own): the
  # development-only flags would share the host's network or drop bubblewrap (and preview URLs with it).
  validation {
    condition = alltrue(flatten([for _, r in var.regions : [for i, a in r.runner_args : !(
      can(regex("^--?(insecure-no-sandbox|preview-host-loopback)(=.*)?$", a)) ||
      can(regex("^--?sandbox-network=host$", a)) ||
      (can(regex("^--?sandbox-network$", a)) && try(r.runner_args[i + 1], "") == "host")
    )]]))
    error_message = "runner_args must not carry the runner's development-only flags (-insecure-no-sandbox, -sandbox-network host, -preview-host-loopback): production sandboxes have a network of their own."
  }
  validation {
    condition     = alltrue([for _, r in var.regions : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", r.bucket.name))])
    error_message = "every bucket name must be an S3 bucket name (3 to 63 lower-case letters, digits, '.' and '-')."
  }
}

variable "vault_address" {
  type        = string
  description = "the Vault all regions share, the tasks' default Vault address"
}

variable "jobs_dir" {
  type        = string
  description = "the directory of edge.nomad.hcl, scheduler.nomad.hcl and billing.nomad.hcl"
}

variable "warren_binary" {
  type = string
}

variable "vault_legacy_token" {
  type = bool
}

variable "kv_mount" {
  type = string
}

variable "nomad_role_path" {
  type = string
}

variable "webhook_secret" {
  type        = string
  description = "the KV v2 path in kv_mount of the operator's task webhook secret; empty: task webhooks off"
  default     = ""
}

variable "preview_domain" {
  type        = string
  description = "the wildcard domain of preview URLs (the edges' -preview-domain): *.<preview_domain> must reach the edges' load balancers; empty: previews off"
  default     = ""

  # A DNS name without scheme, port or path, lower case, with room for the 55-character preview label
  # (<port>-<id>-<sig>.) within DNS's 253 characters.
  validation {
    condition     = var.preview_domain == "" || (length(var.preview_domain) <= 197 && can(regex("^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.preview_domain)))
    error_message = "preview_domain must be a lower-case DNS name of at least two labels (e.g. preview.example.com), without scheme, port, path or wildcard, at most 197 characters; empty: previews off."
  }
}

variable "mesh_pki_role" {
  type = string
}

variable "mesh_pki_mount" {
  type = string
}
