// Package egress is a sandbox's egress policy and the gateway that enforces it (issue #26;
// docs/ARCHITECTURE.md#egress-gateway). It is not wired into the runner yet.
//
// # Policy
//
// A Policy is one layer: a mode (open, allowlist, closed) and allow and deny rules naming destinations by
// domain (exact, or "*." for every name below a domain), by CIDR, port and protocol. Parse validates a
// tenant's policy and refuses it with a wire error naming the member at fault. A Stack is the policy in
// force for one sandbox: the user's override or else the issuer's default, narrowed by further layers (a
// token's claims) and never widened by them (a request must pass every layer), under the operator's hard
// deny list (HardDeny: internal/netdeny's ranges and the host's addresses, minus what the operator opened),
// which no tenant rule opens.
//
// # Gateway
//
// A Gateway serves one sandbox from outside it, on sockets its caller opens where they belong (the
// runner's host) and Redirect sends the sandbox's traffic to:
//   - a resolver that asks upstream only the A and AAAA records of names the stack allows, drops answers
//     the hard deny list refuses (DNS rebinding), refuses one whose chain goes through a denied name,
//     remembers which addresses came from which names, and bounds names and query rate (DNS tunnelling);
//   - a TCP proxy that reads each connection's original destination, refuses the hard deny list, peeks a
//     TLS ClientHello or an HTTP request head, refuses CONNECT and a name (SNI, Host) the resolver did not
//     answer the destination for (domain fronting), and splices what it allows, judging every request
//     of plain HTTP and the first bytes of a client that waited until the server spoke;
//   - for hosts an Injection covers, TLS terminated with a leaf of the sandbox's CA (whose key stays in the
//     gateway) and the injection's placeholder replaced with its secret; a placeholder sent anywhere else
//     is refused.
//
// UDP but DNS is refused by Redirect's table, or judged there by the stack's CIDR rules for UDP (not
// recorded: the gateway never sees it), and so is every other protocol but TCP (ICMP included). A Meter holds the relayed bytes to the user's egress budget.
// Every other decision is a Record handed to a Sink
// and counted in Metrics. SetStack changes the policy of a running gateway for its next query and
// connection.
//
// # Limits
//
// Without TLS termination the gateway sees a TLS connection's first ClientHello (its outer SNI, with
// Encrypted Client Hello), not the Host of the requests inside it. Plain HTTP upgrades are refused. A
// brokered host that echoes its request's headers back gives the secret to the sandbox (TRACE, and a
// header value shaped to be refused and quoted back, are refused). The placeholder check is a tripwire:
// a placeholder transformed, or inside a tunnel not terminated, is not seen. In open mode, a name and an
// address both found outside the gateway's resolver cannot be compared.
package egress
