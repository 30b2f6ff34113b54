// Package mesh is the edge-to-edge transport of the multi-region mesh (issue #10): a Node per edge process
// opens streams to the edges of other regions and accepts theirs, over QUIC (quic-go). README.md beside
// this file says what it guarantees, its limits and what it costs, measured.
//
//   - Mutual TLS 1.3. Each edge's certificate names its region in a URI SAN urn:warren:region:<name>
//     (ValidRegion). Both sides verify the peer's chain against Config.Roots; the listener also requires the
//     region to be one of Config.KnownRegions, and the dialer that it is the region it dialed. Refusals are
//     typed (ErrUntrusted, ErrUnknownRegion, ErrRegionMismatch; the refused side sees ErrHandshakeRefused) and
//     counted in warren_mesh_failures_total. Certificates come from a function, so rotation needs no restart:
//     DevCA for development, VaultSource (Vault's PKI engine) in production.
//   - One QUIC connection per peer (region and address), shared by all Opens, redialed transparently when it
//     died. One QUIC stream per forwarded client connection or request; each starts with a small versioned
//     Header (kind, request id, issuer, user, epoch) that the accepting node parses, bounded, and
//     acknowledges before the Handler runs, so Open returns only streams the peer took.
//   - Flow control end to end: QUIC's per-stream and per-connection receive windows (Config.StreamWindow,
//     ConnectionWindow) bound what a peer can make a node buffer; a writer whose reader stops blocks. Nothing
//     in this package buffers without bound.
//   - Keepalive and idle timeout (Config.KeepAlive, IdleTimeout); every dial, header read and Open bounded.
//   - Metrics warren_mesh_*: streams opened and accepted by peer and outcome, open streams, payload bytes by
//     peer and direction, connections and smoothed RTT per peer (from quic-go's ConnectionStats), failures
//     by peer and reason.
package mesh
