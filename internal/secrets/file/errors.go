package file

import "errors"

var (
	// ErrIssuerExists is returned by CreateIssuer when the issuer already has keys.
	ErrIssuerExists = errors.New("issuer already exists")
	// ErrInvalidIssuer means an issuer id is empty, longer than 256 bytes or holds control characters.
	ErrInvalidIssuer = errors.New("invalid issuer id")
	// ErrCorrupt means the secrets file exists but cannot be understood.
	ErrCorrupt = errors.New("corrupt secrets file")
)
