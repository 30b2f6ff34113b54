package mesh

import (
	"errors"

	"github.com/quic-go/quic-go"
)

// Every error this package returns for one of these conditions wraps the sentinel, so errors.Is works, and
// Reason maps it to the label it is counted under in warren_mesh_failures_total.
var (
	ErrConfig = errors.New("invalid mesh config")
	// ErrHeader: a stream preamble is malformed (truncated, a field too long or not printable UTF-8).
	ErrHeader = errors.New("malformed mesh stream header")
	// ErrVersion: a stream preamble of a version this node does not speak.
	ErrVersion = errors.New("unknown mesh stream header version")
	// ErrKind: a stream preamble of a kind this node does not know.
	ErrKind = errors.New("unknown mesh stream kind")
	// ErrUntrusted: the peer's certificate is missing or does not chain to the configured roots.
	ErrUntrusted = errors.New("peer certificate not trusted")
	// ErrUnknownRegion: the peer's certificate names no region, or one not in the known set.
	ErrUnknownRegion = errors.New("peer certificate names no known region")
	// ErrRegionMismatch: the dialed peer's certificate names another region than the one dialed.
	ErrRegionMismatch = errors.New("peer certificate names another region than the one dialed")
	// ErrHandshakeRefused: the peer refused the handshake (our certificate, most likely).
	ErrHandshakeRefused = errors.New("peer refused the mesh handshake")
	// ErrDial: the peer could not be reached, or the connection to it failed.
	ErrDial = errors.New("mesh dial failed")
	// ErrStreamRefused: the peer refused a stream; the error also wraps the peer's reason (ErrVersion, ErrKind,
	// ErrHeader) when it gave one.
	ErrStreamRefused = errors.New("peer refused the mesh stream")
	// ErrStreamReset: the peer reset a stream after accepting it.
	ErrStreamReset = errors.New("mesh stream reset by peer")
	// ErrClosed: the node is closed.
	ErrClosed = errors.New("mesh node closed")
)

// The failure reasons: labels of warren_mesh_failures_total and what Reason answers.
const (
	ReasonUntrusted        = "untrusted"
	ReasonUnknownRegion    = "unknown_region"
	ReasonRegionMismatch   = "region_mismatch"
	ReasonHandshakeRefused = "handshake_refused"
	ReasonDialFailed       = "dial_failed"
	ReasonStreamRefused    = "stream_refused"
	ReasonStreamReset      = "stream_reset"
	ReasonBadHeader        = "bad_header"
	ReasonTooManyConns     = "too_many_connections"
	ReasonOther            = "other"
	reasonCanceled         = "canceled"
	reasonClosed           = "closed"
	reasonOK               = "ok"
	peerUnknown            = "unknown" // the peer label of a peer that did not prove a known region
	streamCodeCanceled     = quic.StreamErrorCode(0x1)
	streamCodeBadVersion   = quic.StreamErrorCode(0x10)
	streamCodeBadKind      = quic.StreamErrorCode(0x11)
	streamCodeBadHeader    = quic.StreamErrorCode(0x12)
	streamCodeClosing      = quic.StreamErrorCode(0x13)
	connCodeClosing        = quic.ApplicationErrorCode(0x0)
	connCodeTooManyConns   = quic.ApplicationErrorCode(0x1)
	connCodeNoRegion       = quic.ApplicationErrorCode(0x2)
	maxPeerChain           = 4 // certificates a peer may present: leaf and intermediates
	maxRegionLen           = 32
	regionURIPrefix        = "urn:warren:region:"
	alpn                   = "warren-mesh/1"
)

var reasons = []struct {
	err   error
	label string
}{
	{ErrUntrusted, ReasonUntrusted},
	{ErrUnknownRegion, ReasonUnknownRegion},
	{ErrRegionMismatch, ReasonRegionMismatch},
	{ErrHandshakeRefused, ReasonHandshakeRefused},
	{ErrStreamRefused, ReasonStreamRefused},
	{ErrStreamReset, ReasonStreamReset},
	{ErrVersion, ReasonBadHeader},
	{ErrKind, ReasonBadHeader},
	{ErrHeader, ReasonBadHeader},
	{ErrDial, ReasonDialFailed},
	{ErrClosed, reasonClosed},
}

// Reason is the failure label for err: "" for nil, one of the Reason* constants for this package's errors,
// ReasonOther for anything else. It never contains anything a peer sent.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return ReasonOther
}

// refusal maps a stream error code the acceptor reset a stream with to the reason it gave.
func refusal(code quic.StreamErrorCode) error {
	switch code {
	case streamCodeBadVersion:
		return ErrVersion
	case streamCodeBadKind:
		return ErrKind
	case streamCodeBadHeader:
		return ErrHeader
	case streamCodeClosing:
		return ErrClosed
	}
	return nil
}

// refusalCode is the stream error code the acceptor resets a stream with when its header fails with err.
func refusalCode(err error) quic.StreamErrorCode {
	switch {
	case errors.Is(err, ErrVersion):
		return streamCodeBadVersion
	case errors.Is(err, ErrKind):
		return streamCodeBadKind
	}
	return streamCodeBadHeader
}
