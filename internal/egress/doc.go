// Package egress is a sandbox's egress policy and the gateway that enforces it (issue #26).
//
// A Policy is one layer: a mode (open, allowlist, closed) and allow and deny rules naming destinations by
// domain (exact, or "*." for every name below a domain), by CIDR, port and protocol. Parse validates a
// tenant's policy and refuses it with a wire error naming the member at fault. A Stack is the policy in
// force for one sandbox: the user's override or else the issuer's default, narrowed by further layers (a
// token's claims) and never widened by them (a request must pass every layer), under the operator's hard
// deny list (HardDeny: internal/netdeny's ranges and the host's addresses, minus what the operator opened),
// which no tenant rule opens.
package egress
