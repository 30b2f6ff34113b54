# The billing role (docs/ARCHITECTURE.md#billing): the admin API (issuers, quotas, prices, usage) over CockroachDB, with
# issuer signing keys kept in Vault. Stateless; two instances for availability.
#
#   nomad job run -var region=eu-west jobs/billing.nomad.hcl
#
# The job runs in the Nomad region named by var.region (a Warren region is a Nomad region; "global" is the
# region of the agent it is submitted to). This file is also a Terraform template: terraform/modules/jobs
# renders it with templatefile for every region of terraform/, so it writes Nomad's runtime interpolations with
# a doubled dollar sign ($${NOMAD_ADDR_http}: Nomad and Terraform both read it as the plain interpolation) and
# interpolates nothing else inside strings.
#
# On Nomad 1.6 add -var vault_legacy_token=true (Vault tokens from the servers instead of workload identity;
# see the README, "Nomad, Consul and Vault versions").
#
# Secrets (database URL) come from Vault through a template; VAULT_TOKEN from Nomad's Vault integration.

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "region" {
  type    = string
  default = "global"
}

variable "count" {
  type    = number
  default = 2
}

variable "warren_binary" {
  type    = string
  default = "/usr/local/bin/warren"
}

variable "driver" {
  type    = string
  default = "exec"
}

variable "vault_addr" {
  type    = string
  default = "https://vault.service.consul:8200"
}

variable "vault_role" {
  type        = string
  default     = "warren-billing"
  description = "Nomad 1.7 and later: the role of Vault's JWT auth method for Nomad workload identities this task logs in with"
}

variable "vault_legacy_token" {
  type        = bool
  default     = false
  description = "Nomad 1.6 (whose servers derive task tokens from their own Vault token): the legacy token flow with vault_policies instead of vault_role"
}

variable "vault_policies" {
  type        = list(string)
  default     = ["warren-billing"]
  description = "with vault_legacy_token: the Vault policies of the task's token"
}

variable "secrets_path" {
  type        = string
  default     = "secret/data/warren/billing"
  description = "Vault KV v2 path holding db (CockroachDB URL)"
}

variable "webhook_secret_path" {
  type        = string
  default     = ""
  description = "Vault KV v2 path holding secret, the operator's task webhook secret the runners sign with (the runners' -webhook-secret-file): rendered to a file for -webhook-secret-file, so GET /v1/issuers/{iss}/webhook-secret answers each issuer's secret. Empty (the default): no template, no flag, and that route answers unavailable. Set it only once the secret is written: a template whose secret is missing keeps the task from starting."
}

job "warren-billing" {
  region      = var.region
  type        = "service"
  datacenters = var.datacenters

  meta {
    warren_role   = "billing"
    warren_region = var.region
  }

  update {
    max_parallel      = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "2m"
    progress_deadline = "5m"
    auto_revert       = true
  }

  group "billing" {
    count = var.count

    network {
      port "http" {}
      port "metrics" {}
    }

    service {
      name     = "warren-billing"
      port     = "http"
      provider = "consul"
      tags     = ["warren", "billing", var.region]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    # The metrics listener (-metrics-listen: GET /metrics and nothing else), found by Prometheus through this
    # Consul service (docs/ops/prometheus.yml). Keep the port to Prometheus: the load balancer has no route to it.
    service {
      name     = "warren-billing-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["warren", "metrics", var.region]

      meta {
        warren_region = var.region
      }
    }

    task "billing" {
      driver = var.driver

      config {
        command = var.warren_binary
        args = concat([
          "billing",
          "-listen", "$${NOMAD_ADDR_http}",
          "-metrics-listen", "$${NOMAD_ADDR_metrics}",
          "-region", var.region,
          "-vault", var.vault_addr,
          ], var.webhook_secret_path == "" ? [] : [
          "-webhook-secret-file", "$${NOMAD_SECRETS_DIR}/webhook-secret",
        ])
      }

      # VAULT_TOKEN and the templates' Vault access: workload identity, or with vault_legacy_token Nomad 1.6's
      # token flow (see jobs/edge.nomad.hcl).
      dynamic "vault" {
        for_each = var.vault_legacy_token ? [] : [1]
        content {
          role        = var.vault_role
          change_mode = "restart"
        }
      }

      dynamic "identity" {
        for_each = var.vault_legacy_token ? [] : [1]
        content {
          name = "vault_default"
          aud  = ["vault.io"]
          ttl  = "1h"
        }
      }

      dynamic "vault" {
        for_each = var.vault_legacy_token ? [1] : []
        content {
          policies    = var.vault_policies
          change_mode = "restart"
        }
      }

      template {
        data        = format("{{ with secret %q }}WARREN_DB={{ .Data.data.db }}{{ end }}\n", var.secrets_path)
        destination = "secrets/warren.env"
        env         = true
        change_mode = "restart"
      }

      # The operator's task webhook secret (webhook_secret_path), read at start: a new secret restarts the task.
      dynamic "template" {
        for_each = var.webhook_secret_path == "" ? [] : [1]
        content {
          data        = format("{{ with secret %q }}{{ .Data.data.secret }}{{ end }}", var.webhook_secret_path)
          destination = "secrets/webhook-secret"
          change_mode = "restart"
          perms       = "600"
        }
      }

      env {
        WARREN_LOG_LEVEL = "info"
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      resources {
        cpu    = 300
        memory = 256
      }
    }
  }
}
