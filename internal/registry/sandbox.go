package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// SandboxID names (issuer, user) in paths, registry keys and job names: a hash, so user-controlled strings
// never reach a file system path, a Consul key or a scheduler's job name. It lives here, not in the
// scheduler role, because the registry adapters key on it too.
func SandboxID(issuer, user string) string {
	h := sha256.Sum256([]byte(issuer + "\x00" + user))
	return hex.EncodeToString(h[:16])
}

// Warm is one warm runner (issue 4): started before anyone needs it, without a user, announced in its
// region's pool until a scheduler claims it. Key is its bearer key for the assignment call; never logged.
// The JSON names are the announcement's stored form (the consul adapter's warm keys).
type Warm struct {
	Region string `json:"region"`
	Alloc  string `json:"alloc"`
	Addr   string `json:"addr"`
	Key    string `json:"key"`
	// Job is the runner's Nomad job id when it knows it ($NOMAD_JOB_ID), so a pool can tell which of the
	// jobs it registered have announced themselves.
	Job string `json:"job,omitempty"`
}

// ErrNoWarm means the region's pool of warm runners is empty right now.
var ErrNoWarm = errors.New("no warm runner available")
