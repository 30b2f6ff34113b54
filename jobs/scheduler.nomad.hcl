# The scheduler role (docs/ARCHITECTURE.md#scheduler, #placements): claims placements in CockroachDB and starts each user's sandbox as a
# Nomad job from jobs/sandbox.nomad.hcl (embedded in the binary). One instance per region: placements are
# claimed with compare-and-set, so a second instance during a deployment is safe, but one is enough.
#
#   nomad job run -var region=eu-west jobs/scheduler.nomad.hcl
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
# Secrets (database URL, the key shared with the edges, a Nomad token allowed to submit sandbox jobs) come
# from Vault through templates into the task's secrets directory, never from this file or a command line.

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "region" {
  type    = string
  default = "global"
}

variable "warren_binary" {
  type    = string
  default = "/usr/local/bin/warren"
}

variable "driver" {
  type    = string
  default = "exec"
}

variable "consul_addr" {
  type    = string
  default = "127.0.0.1:8500"
}

variable "nomad_addr" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "the node's Nomad agent, which forwards to the servers"
}

variable "sandbox_datacenter" {
  type    = string
  default = "dc1"
}

variable "sandbox_driver" {
  type        = string
  default     = "exec"
  description = "task driver of sandboxes"
}

variable "runner_args" {
  type        = list(string)
  default     = []
  description = "extra flags for every runner, each passed as -runner-arg (e.g. -s3-bucket=snapshots)"
}

variable "runner_webhook_secret_path" {
  type        = string
  default     = ""
  description = "Vault KV v2 path of the operator's task webhook secret every sandbox job renders for its runner (-runner-webhook-secret); empty (the default): task webhooks are refused. Set it only once the secret is written: a sandbox whose template names a missing secret does not start."
}

variable "runner_vault_role" {
  type        = string
  default     = "warren-runner"
  description = "with runner_webhook_secret_path: the Vault role the sandbox jobs log in with (-runner-vault-role)"
}

variable "vault_role" {
  type        = string
  default     = "warren-scheduler"
  description = "Nomad 1.7 and later: the role of Vault's JWT auth method for Nomad workload identities this task logs in with"
}

variable "vault_legacy_token" {
  type        = bool
  default     = false
  description = "Nomad 1.6 (whose servers derive task tokens from their own Vault token): the legacy token flow with vault_policies instead of vault_role"
}

variable "vault_policies" {
  type        = list(string)
  default     = ["warren-scheduler"]
  description = "with vault_legacy_token: the Vault policies of the task's token"
}

variable "secrets_path" {
  type        = string
  default     = "secret/data/warren/scheduler"
  description = "Vault KV v2 path holding db (CockroachDB URL) and scheduler_key"
}

variable "nomad_role_path" {
  type        = string
  default     = "nomad/creds/warren-scheduler"
  description = "Vault Nomad secrets engine role minting the scheduler's Nomad token; empty: no NOMAD_TOKEN (a Nomad without ACLs)"
}

locals {
  nomad_token_template = var.nomad_role_path == "" ? "" : format("{{ with secret %q }}NOMAD_TOKEN={{ .Data.secret_id }}{{ end }}", var.nomad_role_path)
}

job "warren-scheduler" {
  region      = var.region
  type        = "service"
  datacenters = var.datacenters

  meta {
    warren_role   = "scheduler"
    warren_region = var.region
  }

  update {
    max_parallel      = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "2m"
    progress_deadline = "5m"
    auto_revert       = true
  }

  group "scheduler" {
    count = 1

    # The usage spool (compute seconds the ledger could not take yet) lives in the allocation's data dir;
    # a sticky, migrating disk hands it to the replacement allocation, which replays it.
    ephemeral_disk {
      sticky  = true
      migrate = true
      size    = 300
    }

    network {
      port "http" {}
      port "metrics" {}
    }

    service {
      name     = "warren-scheduler"
      port     = "http"
      provider = "consul"
      tags     = ["warren", "scheduler", var.region]

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
      name     = "warren-scheduler-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["warren", "metrics", var.region]

      meta {
        warren_region = var.region
      }
    }

    task "scheduler" {
      driver = var.driver

      config {
        command = var.warren_binary
        args = concat([
          "scheduler",
          "-listen", "$${NOMAD_ADDR_http}",
          "-metrics-listen", "$${NOMAD_ADDR_metrics}",
          "-region", var.region,
          "-consul", var.consul_addr,
          "-nomad", var.nomad_addr,
          "-datacenter", var.sandbox_datacenter,
          "-nomad-driver", var.sandbox_driver,
          "-runner-binary", var.warren_binary,
          "-kill-timeout", "45s",
          "-spool", "$${NOMAD_ALLOC_DIR}/data/usage.spool",
          ], var.runner_webhook_secret_path == "" ? [] : [
          "-runner-webhook-secret", var.runner_webhook_secret_path,
          "-runner-vault-role", var.runner_vault_role,
        ], flatten([for a in var.runner_args : ["-runner-arg", a]]))
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

      # WARREN_DB, WARREN_SCHEDULER_KEY and (unless nomad_role_path is empty) NOMAD_TOKEN from Vault. (format:
      # this file is also a Terraform template, see jobs/edge.nomad.hcl.)
      template {
        data = format(<<-EOT
          {{ with secret %q }}
          WARREN_DB={{ .Data.data.db }}
          WARREN_SCHEDULER_KEY={{ .Data.data.scheduler_key }}
          {{ end }}
          %s
        EOT
        , var.secrets_path, local.nomad_token_template)
        destination = "secrets/warren.env"
        env         = true
        change_mode = "restart"
      }

      env {
        WARREN_LOG_LEVEL = "info"
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
