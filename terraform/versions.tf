# The providers' sources and versions are pinned once, in modules/region/versions.tf: Terraform applies a
# module's version constraints to the whole configuration, and infers hashicorp/nomad, consul and vault for
# the provider blocks of main.tf.
terraform {
  required_version = ">= 1.5.0"
}
