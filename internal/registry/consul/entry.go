package consul

import (
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
)

// entryJSON is the value of an owner key. Field names are part of the layout other processes (edges of
// other versions) read: add fields, never rename them. Unknown fields are ignored on decode.
type entryJSON struct {
	Issuer string    `json:"issuer"`
	User   string    `json:"user"`
	Epoch  int64     `json:"epoch"`
	Region string    `json:"region,omitempty"`
	Alloc  string    `json:"alloc"`
	Addr   string    `json:"addr"`
	Key    string    `json:"key,omitempty"`
	Since  time.Time `json:"since"`
}

// maxEntrySize bounds what decodeEntry reads; a real entry is a few hundred bytes.
const maxEntrySize = 16 << 10

// allocPattern is what an alloc may be: it becomes part of a Consul service ID, which is a URL path segment
// of the agent API. Nomad allocation IDs (UUIDs) and local pids fit.
var allocPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// encodeEntry is the owner key's value for e.
func encodeEntry(e registry.Entry) ([]byte, error) {
	if err := validateEntry(e); err != nil {
		return nil, err
	}
	return json.Marshal(entryJSON{
		Issuer: e.Issuer, User: e.User, Epoch: e.Epoch, Region: e.Region,
		Alloc: e.Alloc, Addr: e.Addr, Key: e.Key, Since: e.Since.UTC(),
	})
}

// decodeEntry parses an owner key's value. Anything but one well-formed, complete entry is an error
// wrapping ErrBadEntry; the error never quotes the value (it holds the bearer key).
func decodeEntry(b []byte) (registry.Entry, error) {
	if len(b) > maxEntrySize {
		return registry.Entry{}, fmt.Errorf("%w: %d bytes", ErrBadEntry, len(b))
	}
	var j entryJSON
	if err := json.Unmarshal(b, &j); err != nil { // also refuses data after the object
		return registry.Entry{}, fmt.Errorf("%w: %s", ErrBadEntry, jsonErrorKind(err))
	}
	e := registry.Entry{Issuer: j.Issuer, User: j.User, Epoch: j.Epoch, Region: j.Region,
		Alloc: j.Alloc, Addr: j.Addr, Key: j.Key, Since: j.Since}
	if err := validateEntry(e); err != nil {
		return registry.Entry{}, err
	}
	return e, nil
}

// jsonErrorKind describes a decoding error without quoting the input (a syntax error's message may echo
// part of it).
func jsonErrorKind(err error) string {
	switch err := err.(type) {
	case *json.SyntaxError:
		return "invalid JSON at offset " + strconv.FormatInt(err.Offset, 10)
	case *json.UnmarshalTypeError:
		return "wrong type for field " + strconv.Quote(err.Field)
	default:
		return "invalid JSON"
	}
}

// validateEntry checks what the edge relies on: who it is for, a fencing epoch, and somewhere to dial.
func validateEntry(e registry.Entry) error {
	switch {
	case e.Issuer == "" || e.User == "":
		return fmt.Errorf("%w: no issuer or user", ErrBadEntry)
	case e.Epoch < 0:
		return fmt.Errorf("%w: negative epoch %d", ErrBadEntry, e.Epoch)
	case !allocPattern.MatchString(e.Alloc):
		return fmt.Errorf("%w: alloc is not 1-128 of [A-Za-z0-9._-]", ErrBadEntry)
	}
	host, port, err := net.SplitHostPort(e.Addr)
	if err != nil || host == "" {
		return fmt.Errorf("%w: addr is not host:port", ErrBadEntry)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: addr has no valid port", ErrBadEntry)
	}
	return nil
}
