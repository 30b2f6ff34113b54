# The per-user sandbox job (docs/ARCHITECTURE.md#single-ownership, #security-boundary): one `warren runner` for one (issuer, user) at one placement
# epoch.
#
# This file is a TEMPLATE the scheduler fills at run time: its Nomad driver (scheduler/nomad) sends this very
# file to Nomad's /v1/jobs/parse endpoint with the variables below, then registers the result, so what is
# reviewed here and what runs cannot drift. To try it by hand:
#
#   nomad job plan -var sandbox_id=$(printf '%032x' 1) -var issuer=iss -var user=alice -var epoch=1 \
#     -var warren_binary=/usr/local/bin/warren jobs/sandbox.nomad.hcl
#
# Identity. The job is named after the hashed sandbox id and the epoch, never after raw user strings (which
# go to meta and to the runner's flags only). The epoch, not Nomad, is the sandbox's identity: a failed or
# lost allocation is never restarted or rescheduled by Nomad; the next connection claims a new epoch, which
# is a new job. Two runners of one user never serve at once because each holds its user's Consul lock
# (docs/ARCHITECTURE.md#owner-lock) and stops when it loses it.
#
# Readiness. The runner generates its own bearer key, listens on the "api" port, then registers itself
# (address, key, epoch, allocation id) under its user's lock in Consul; the driver waits for that entry.

variable "sandbox_id" {
  type        = string
  description = "scheduler.SandboxID(issuer, user): 32 hex digits, safe in names and paths"
  validation {
    condition     = var.sandbox_id != "" && regex_replace(var.sandbox_id, "^[0-9a-f]{32}$", "") == ""
    error_message = "The sandbox_id must be 32 lowercase hex digits (scheduler.SandboxID)."
  }
}

variable "issuer" {
  type        = string
  description = "issuer (project) id of the sandbox's user"
}

variable "user" {
  type        = string
  description = "end-user id"
}

variable "epoch" {
  type        = number
  description = "placement epoch (fencing token) this runner serves"
  validation {
    condition     = var.epoch >= 1 && floor(var.epoch) == var.epoch
    error_message = "The epoch must be a positive integer."
  }
}

variable "region" {
  type        = string
  default     = ""
  description = "Warren region reported to agent clients"
}

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "warren_binary" {
  type        = string
  default     = "/usr/local/bin/warren"
  description = "path of the warren binary on the Nomad clients"
}

variable "driver" {
  type        = string
  default     = "raw_exec"
  description = "task driver: exec in production (chroot, cgroups), raw_exec in tests"
  validation {
    condition     = contains(["exec", "raw_exec"], var.driver)
    error_message = "The driver must be exec or raw_exec."
  }
}

variable "warm" {
  type        = bool
  default     = false
  description = "a warm-pool runner: started before anyone needs it, it waits for a scheduler to assign it a sandbox (issuer, user and epoch above are then placeholders, replaced by the assignment)"
}

variable "runner_args" {
  type        = list(string)
  default     = []
  description = "extra runner flags, e.g. [\"-consul\", \"127.0.0.1:8500\", \"-s3-bucket\", \"snapshots\"]"
}

variable "env" {
  type        = map(string)
  default     = {}
  description = "extra environment of the runner (no secrets: those come from Vault, see the template note below)"
}

variable "webhook_secret_path" {
  type        = string
  default     = ""
  description = "Vault KV v2 path holding secret, the operator's task webhook secret (docs/PROTOCOL.md#tasks): rendered into the task's secrets directory for -webhook-secret-file, with a Vault block of vault_role. Empty (the default): no Vault access, no template, and the runner refuses tasks asking for a webhook. Set it only once the secret is written: a template whose secret is missing keeps the runner from starting."
}

variable "vault_role" {
  type        = string
  default     = "warren-runner"
  description = "with webhook_secret_path, Nomad 1.7 and later: the role of Vault's JWT auth method for Nomad workload identities the runner logs in with"
}

variable "vault_legacy_token" {
  type        = bool
  default     = false
  description = "with webhook_secret_path, Nomad 1.6: the legacy token flow with vault_policies instead of vault_role"
}

variable "vault_policies" {
  type        = list(string)
  default     = ["warren-runner"]
  description = "with webhook_secret_path and vault_legacy_token: the Vault policies of the task's token"
}

variable "cpu" {
  type        = number
  default     = 500
  description = "CPU, MHz"
}

variable "memory" {
  type        = number
  default     = 1024
  description = "memory, MiB"
}

variable "disk" {
  type        = number
  default     = 1024
  description = "ephemeral disk (workspace, state), MiB"
}

variable "kill_timeout" {
  type        = string
  default     = "45s"
  description = "SIGTERM to SIGKILL: the runner's graceful stop plus its final snapshot (at least 35s). Clients need max_kill_timeout at least this long."
}

variable "stop_after_client_disconnect" {
  type        = string
  default     = "1m"
  description = "a client cut off from the servers this long stops the sandbox itself"
}

locals {
  # The Nomad client reads a task's config (command, args) as an HCL template, with the task's environment
  # and the node's attributes as variables: a user named "${attr.unique.hostname}" would become another
  # user, and one named "%{x}" would fail the task. Doubling the first character of the two template
  # sequences (the client reads $${ as a literal ${ and %%{ as %{) hands every string to the runner
  # verbatim. In this file's own strings "$${" is a literal ${ and "$$${" a literal $${ (likewise for %).
  issuer_arg = replace(replace(var.issuer, "$${", "$$${"), "%%{", "%%%{")
  user_arg   = replace(replace(var.user, "$${", "$$${"), "%%{", "%%%{")
  region_arg = replace(replace(var.region, "$${", "$$${"), "%%{", "%%%{")
}

job "sandbox" {
  id   = "sandbox-${var.sandbox_id}-e${var.epoch}"
  name = "sandbox-${var.sandbox_id}-e${var.epoch}"
  # batch, not service: a sandbox runs until its runner exits (asleep after idling, stopped, or failed) and
  # that exit is final. Nomad replaces a service job's allocation that completes, which would wake a
  # sleeping sandbox again under the same epoch.
  type        = "batch"
  datacenters = var.datacenters

  meta {
    warren_role       = var.warm ? "warm" : "sandbox"
    warren_sandbox_id = var.sandbox_id
    warren_issuer     = var.issuer
    warren_user       = var.user
    warren_epoch      = var.epoch
    warren_region     = var.region
  }

  group "sandbox" {
    count = 1

    # The epoch is the identity: Nomad restarts nothing and reschedules nothing.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    # Nomad 1.6 has two mutually exclusive group settings for a client cut off from the servers.
    # max_client_disconnect keeps the cut-off allocation running ("unknown") and may bring it back when the
    # client reconnects, which is the opposite of what a fenced sandbox wants. stop_after_client_disconnect
    # makes the partitioned client stop the runner itself, and delays the servers' replacement until then.
    # (The runner also fences itself when it loses its Consul lock, and the driver deregisters a job whose
    # allocation it saw go terminal, so a replacement under the same epoch does not start.)
    # Nomad 1.8 moved the setting to disconnect { stop_on_client_after } and 1.10 ignores this one, silently;
    # the file must still parse on 1.6, which has no disconnect block, so the Nomad driver copies the value
    # into the parsed job's disconnect block (scheduler/nomad setDisconnect). A copy of this template run
    # by hand on Nomad 1.8 or later needs that block written out.
    stop_after_client_disconnect = var.stop_after_client_disconnect

    ephemeral_disk {
      size = var.disk
    }

    network {
      port "api" {}
      port "metrics" {}
    }

    # The metrics listener (-metrics-listen: GET /metrics and nothing else), found by Prometheus through this
    # Consul service (docs/ops/prometheus.yml). Keep the port to Prometheus: the load balancer has no route to it.
    service {
      name     = "warren-runner-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["warren", "metrics"]

      meta {
        warren_region = local.region_arg
      }
    }

    task "runner" {
      driver = var.driver
      # The runner must be root inside its task: it gives each sandbox an unprivileged host uid, network
      # namespace and cgroup of its own (SECURITY.md). exec runs tasks as nobody unless told otherwise, and
      # its clients refuse root until the operator removes it from client { options { "user.denylist" } };
      # raw_exec runs as the Nomad agent (root).
      user = var.driver == "exec" ? "root" : ""

      config {
        command = var.warren_binary
        args = concat([
          "runner",
          "-issuer", local.issuer_arg,
          "-user", local.user_arg,
          "-epoch", "${var.epoch}",
          "-region", local.region_arg,
          "-listen", "${NOMAD_IP_api}:${NOMAD_PORT_api}",
          "-metrics-listen", "${NOMAD_ADDR_metrics}",
          "-alloc", "${NOMAD_ALLOC_ID}",
          "-workspace", "${NOMAD_ALLOC_DIR}/workspace",
          "-state-dir", "${NOMAD_SECRETS_DIR}/state",
          "-home", "${NOMAD_ALLOC_DIR}/home",
          "-snapshot-prefix", "sandboxes/${var.sandbox_id}",
          ], var.warm ? ["-warm"] : [], var.webhook_secret_path == "" ? [] : [
          "-webhook-secret-file", "${NOMAD_SECRETS_DIR}/webhook-secret",
        ], var.runner_args)
      }

      env = merge({
        HOME = "${NOMAD_TASK_DIR}"
        TZ   = "UTC"
      }, var.env)

      # Production: the model API key comes from Vault into the task's secrets directory and environment,
      # never into this file or the scheduler's flags (the runner unsets it at once and keeps it in its
      # model proxy, docs/ARCHITECTURE.md#security-boundary). With Nomad's Vault integration configured:
      #
      #   vault {
      #     role        = "warren-runner"   # Nomad 1.7+: workload identity; on 1.6: policies = ["warren-runner"]
      #     change_mode = "noop"   # a new key reaches the next epoch; never kill a live sandbox for it
      #   }
      #   template {
      #     data        = <<-EOT
      #       {{ with secret "secret/data/warren/model" }}WARREN_MODEL_API_KEY={{ .Data.data.api_key }}{{ end }}
      #     EOT
      #     destination = "${NOMAD_SECRETS_DIR}/model.env"
      #     env         = true
      #     change_mode = "noop"
      #   }
      #
      # Task webhooks use a template of this kind when webhook_secret_path is set (the blocks below).

      # The operator's task webhook secret (webhook_secret_path), read by the runner at start. Nothing about
      # it changing may kill a live sandbox: a new secret reaches the next epoch (change_mode noop).
      dynamic "vault" {
        for_each = var.webhook_secret_path != "" && !var.vault_legacy_token ? [1] : []
        content {
          role        = var.vault_role
          change_mode = "noop"
        }
      }

      dynamic "identity" {
        for_each = var.webhook_secret_path != "" && !var.vault_legacy_token ? [1] : []
        content {
          name = "vault_default"
          aud  = ["vault.io"]
          ttl  = "1h"
        }
      }

      dynamic "vault" {
        for_each = var.webhook_secret_path != "" && var.vault_legacy_token ? [1] : []
        content {
          policies    = var.vault_policies
          change_mode = "noop"
        }
      }

      dynamic "template" {
        for_each = var.webhook_secret_path == "" ? [] : [1]
        content {
          data        = format("{{ with secret %q }}{{ .Data.data.secret }}{{ end }}", var.webhook_secret_path)
          destination = "secrets/webhook-secret"
          change_mode = "noop"
          perms       = "600"
        }
      }

      kill_signal  = "SIGTERM"
      kill_timeout = var.kill_timeout

      resources {
        cpu    = var.cpu
        memory = var.memory
      }

      logs {
        max_files     = 3
        max_file_size = 10
      }
    }
  }
}
