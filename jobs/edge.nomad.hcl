# The edge role (docs/ARCHITECTURE.md#edge): the public WebSocket/HTTP (and WebTransport) front door. Stateless; runs on every edge node
# behind the load balancer, which finds the instances through the Consul service "warren-edge".
#
#   nomad job run -var region=eu-west -var 'datacenters=["eu-west-1a","eu-west-1b"]' jobs/edge.nomad.hcl
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
# Secrets (database URL, the key shared with the scheduler) come from Vault through a template into the
# task's secrets directory; VAULT_TOKEN (the edge reads signing keys from Vault) comes from Nomad's Vault
# integration. None of them is in this file or on a command line.
#
# WebTransport (docs/PROTOCOL.md#webtransport) is off unless a certificate is configured: wt_cert_secret (a
# Vault KV v2 path holding cert and key, PEM, rendered into the task's secrets directory and re-rendered when
# it changes, which the edge notices itself) or wt_cert_file and wt_key_file (PEM files on the node, e.g.
# with raw_exec; exec's chroot must contain them). The edge then serves HTTP/3 on UDP at the port number of
# its TCP listener, the "http" port: a Nomad port is a number reserved for TCP and UDP alike, and with host
# networking (exec, raw_exec) the task binds both itself, so the network block declares nothing more; the
# load balancer or firewall in front must pass UDP to that port too. wt_url is the public WebTransport URL
# announced in GET /v1/regions (https://host:port/wt); empty: https://<the edge's own address>/wt.
#
# Preview URLs (docs/PROTOCOL.md#previews) need preview_domain, a wildcard domain whose names all reach the
# edges' load balancer (DNS *.<preview_domain>, and a wildcard TLS certificate for it where TLS ends):
# previews are then https://<port>-<id>-<sig>.<preview_domain>/, each on its own origin. Empty (the
# default): no -preview-domain, and the edge refuses to create previews (unavailable).

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "region" {
  type        = string
  default     = "global"
  description = "this Warren region's name"
}

variable "public_url" {
  type        = string
  default     = ""
  description = "this region's public base URL (its load balancer), announced in GET /v1/regions; empty: each edge's own address"
}

variable "mesh_pki_role" {
  type        = string
  default     = ""
  description = "Vault PKI role issuing the edge-to-edge mesh certificates (it must allow the URI SAN urn:warren:region:<region>); empty: no mesh, a user another region holds is refused naming that region"
}

variable "mesh_pki_mount" {
  type    = string
  default = "pki"
}

variable "wt_cert_secret" {
  type        = string
  default     = ""
  description = "Vault KV v2 path (as secrets_path: <mount>/data/<path>) holding the WebTransport certificate chain (cert) and key (key), PEM; empty: wt_cert_file, or no WebTransport"
}

variable "wt_cert_file" {
  type        = string
  default     = ""
  description = "with wt_key_file, without wt_cert_secret: the WebTransport certificate chain, a PEM file on the node (re-read when it changes); empty: no WebTransport"
}

variable "wt_key_file" {
  type        = string
  default     = ""
  description = "the PEM private key of wt_cert_file"
}

variable "wt_url" {
  type        = string
  default     = ""
  description = "with a WebTransport certificate: this region's public WebTransport URL (https://host:port/wt), announced in GET /v1/regions; empty: https://<each edge's own address>/wt"
}

variable "preview_domain" {
  type        = string
  default     = ""
  description = "wildcard domain of preview URLs (-preview-domain): *.<preview_domain> must reach the edges; empty: no preview URLs"
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

variable "consul_addr" {
  type        = string
  default     = "127.0.0.1:8500"
  description = "the node's Consul agent (the registry of live runners)"
}

variable "vault_addr" {
  type    = string
  default = "https://vault.service.consul:8200"
}

variable "vault_role" {
  type        = string
  default     = "warren-edge"
  description = "Nomad 1.7 and later: the role of Vault's JWT auth method for Nomad workload identities this task logs in with"
}

variable "vault_legacy_token" {
  type        = bool
  default     = false
  description = "Nomad 1.6 (whose servers derive task tokens from their own Vault token): the legacy token flow with vault_policies instead of vault_role"
}

variable "vault_policies" {
  type        = list(string)
  default     = ["warren-edge"]
  description = "with vault_legacy_token: the Vault policies of the task's token"
}

variable "secrets_path" {
  type        = string
  default     = "secret/data/warren/edge"
  description = "Vault KV v2 path holding db (CockroachDB URL) and scheduler_key"
}

job "warren-edge" {
  region      = var.region
  type        = "service"
  datacenters = var.datacenters

  meta {
    warren_role   = "edge"
    warren_region = var.region
  }

  update {
    max_parallel      = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "2m"
    progress_deadline = "5m"
    auto_revert       = true
  }

  group "edge" {
    count = var.count

    # Spread edges over nodes: one node's loss takes one instance.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      port "http" {} # TCP (HTTP, WebSocket) and, with a WebTransport certificate, UDP (HTTP/3) on the same number
      port "mesh" {} # UDP (QUIC): the mesh to other regions' edges
      port "metrics" {}
    }

    service {
      name     = "warren-edge"
      port     = "http"
      provider = "consul"
      tags     = ["warren", "edge", var.region]

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
      name     = "warren-edge-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["warren", "metrics", var.region]

      meta {
        warren_region = var.region
      }
    }

    task "edge" {
      driver = var.driver

      config {
        command = var.warren_binary
        args = concat([
          "edge",
          "-listen", "$${NOMAD_ADDR_http}",
          "-metrics-listen", "$${NOMAD_ADDR_metrics}",
          "-region", var.region,
          "-public-url", var.public_url,
          "-consul", var.consul_addr,
          "-vault", var.vault_addr,
          ], var.mesh_pki_role == "" ? [] : [
          "-mesh-listen", "$${NOMAD_ADDR_mesh}",
          "-mesh-pki-role", var.mesh_pki_role,
          "-mesh-pki-mount", var.mesh_pki_mount,
          ], var.wt_cert_secret != "" ? [
          "-wt-cert", "$${NOMAD_SECRETS_DIR}/wt.crt",
          "-wt-key", "$${NOMAD_SECRETS_DIR}/wt.key",
          ] : var.wt_cert_file != "" ? [
          "-wt-cert", var.wt_cert_file,
          "-wt-key", var.wt_key_file,
          ] : [], var.wt_url == "" || (var.wt_cert_secret == "" && var.wt_cert_file == "") ? [] : [
          "-wt-url", var.wt_url,
          ], var.preview_domain == "" ? [] : [
          "-preview-domain", var.preview_domain,
        ])
      }

      # VAULT_TOKEN and the templates' Vault access. Nomad 1.7 and later: the task's workload identity for
      # Vault (vault_default, audience vault.io) is exchanged for a token of vault_role at Vault's JWT auth
      # method; Nomad 1.10 has no other way. Nomad 1.6 has no workload identity for Vault: with
      # vault_legacy_token its servers derive a token with vault_policies from their own Vault token. The
      # blocks are dynamic so that the form not chosen is never decoded (Nomad 1.6 knows no vault.role).
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

      # WARREN_DB and WARREN_SCHEDULER_KEY from Vault. The path goes in with format rather than an interpolation:
      # this file is also a Terraform template (terraform/README.md), so its strings interpolate nothing.
      template {
        data = format(<<-EOT
          {{ with secret %q }}
          WARREN_DB={{ .Data.data.db }}
          WARREN_SCHEDULER_KEY={{ .Data.data.scheduler_key }}
          {{ end }}
        EOT
        , var.secrets_path)
        destination = "secrets/warren.env"
        env         = true
        change_mode = "restart"
      }

      # The WebTransport certificate and key from Vault (wt_cert_secret), rewritten when the secret changes; the
      # edge re-reads the files itself, so no restart.
      dynamic "template" {
        for_each = var.wt_cert_secret == "" ? [] : ["cert", "key"]
        content {
          data        = format("{{ with secret %q }}{{ .Data.data.%s }}{{ end }}", var.wt_cert_secret, template.value)
          destination = format("secrets/wt.%s", template.value == "cert" ? "crt" : "key")
          perms       = "0600"
          change_mode = "noop"
        }
      }

      # WARREN_SCHEDULER_URL (the edge's default for -scheduler): this region's scheduler from the Consul
      # catalog; the edge restarts when it moves.
      template {
        data        = <<-EOT
          {{ range $i, $s := service "warren-scheduler" }}{{ if eq $i 0 }}WARREN_SCHEDULER_URL=http://{{ $s.Address }}:{{ $s.Port }}{{ end }}{{ end }}
        EOT
        destination = "local/scheduler.env"
        env         = true
        change_mode = "restart"
      }

      env {
        WARREN_LOG_LEVEL = "info"
      }

      # The edge drains open connections for up to 10 s on SIGTERM.
      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
