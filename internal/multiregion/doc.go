// Package multiregion holds the two-region topology test (issue #10 item 8): regions a and b on one
// machine, each with its own Consul datacenter (WAN-joined), Nomad region (federated), S3 server and
// bucket, scheduler and edge (mesh over QUIC with certificates from Vault's PKI engine), behind a delay
// relay that makes a region near or far; one PostgreSQL and one Vault. Everything is a real process.
package multiregion
