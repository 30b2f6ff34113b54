# Warren managed as code: an issuer with its signing key, its users' default quota, one user's override,
# a model price, and reports of regions and usage. Install the provider first (README.md, "Terraform
# provider"): make terraform-provider && export TF_CLI_CONFIG_FILE=$PWD/bin/terraform-mirror/warren.tfrc

terraform {
  required_version = ">= 1.5"
  required_providers {
    warren = {
      source  = "warren/warren"
      version = "0.1.0"
    }
  }
}

variable "billing_url" {
  description = "The billing API's base URL (warren billing, or warren dev's edge)."
  type        = string
  default     = "http://127.0.0.1:8080"
}

variable "admin_key" {
  description = "An admin key of the billing API; prefer $WARREN_ADMIN_KEY to a value in a file."
  type        = string
  sensitive   = true
  default     = null
}

variable "key_rotation" {
  description = "Change to write a new key version of the issuer (the previous one stays valid for a while)."
  type        = string
  default     = "2026-11"
}

provider "warren" {
  url       = var.billing_url
  admin_key = var.admin_key # null: $WARREN_ADMIN_KEY
}

resource "warren_issuer" "acme" {
  iss      = "acme"
  name     = "Acme Corp"
  rotation = var.key_rotation
}

# The default of all of acme's users: $5 of AI and an hour of sandbox per UTC day, two sessions at once,
# 1 GiB of memory per sandbox; at most 500 sessions across all of acme's users.
resource "warren_quota" "acme" {
  iss                     = warren_issuer.acme.iss
  ai_microdollars         = 5000000
  compute_seconds         = 3600
  window                  = "day"
  max_concurrent_sessions = 2
  max_issuer_sessions     = 500
  max_memory_bytes        = 1073741824
}

# One user's override: unlimited AI for a week, more CPU.
resource "warren_quota" "alice" {
  iss                     = warren_issuer.acme.iss
  sub                     = "alice"
  ai_microdollars         = -1
  compute_seconds         = 36000
  window                  = "week"
  max_concurrent_sessions = 2
  cpu_millis              = 2000
}

# Microdollars per million tokens for models whose name starts with "acme-model".
resource "warren_price" "acme_model" {
  model          = "acme-model"
  input          = 3000000
  output         = 15000000
  cache_read     = 300000
  cache_creation = 3750000
}

data "warren_regions" "all" {}

data "warren_usage" "this_month" {
  iss      = warren_issuer.acme.iss
  from     = "2026-11-01"
  to       = "2026-12-01"
  group_by = "model"
}

output "acme_key_id" {
  value = warren_issuer.acme.key_id
}

# Hand it to acme's backend through a secret manager: terraform output -raw acme_secret
output "acme_secret" {
  value     = warren_issuer.acme.secret
  sensitive = true
}

output "region_urls" {
  value = { for r in data.warren_regions.all.regions : r.name => r.url }
}

output "acme_spend_microdollars" {
  value = data.warren_usage.this_month.ai_microdollars
}
