package isolate

import "errors"

// Sentinel errors. Request validation failures are returned as *wire.Error (invalid_argument) wrapping
// ErrInvalidSpec so the transport can answer with the right code.
var (
	// ErrInvalidSpec: the command, its arguments, working directory or environment are malformed.
	ErrInvalidSpec = errors.New("invalid command")
	// ErrNoBwrap: sandboxing was requested but no bubblewrap binary was configured or found.
	ErrNoBwrap = errors.New("bubblewrap (bwrap) not found")
	// ErrConfig: the Config is unusable.
	ErrConfig = errors.New("invalid isolate config")
	// ErrNoNetwork: a command was started before the sandbox's network was attached (SetNetwork).
	ErrNoNetwork = errors.New("the sandbox network is not ready")
	// ErrNetworkDown: the sandbox's network died for good (Network.Err says why); commands are refused.
	ErrNetworkDown = errors.New("the sandbox network is down")
)
