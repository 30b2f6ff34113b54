package edge

import (
	"bytes"
	"io"
	"mime"
	"net/http"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// precheckMax bounds the JSON body the edge reads to check it before admission; a larger or chunked
// body goes on unread and the runner checks it (a refusal then comes after admission).
const precheckMax = 1 << 20

// precheck refuses a malformed JSON request body before admission, so that a request that cannot succeed
// says so (invalid_argument, with the field where decoding failed) instead of budget_exceeded or
// starting the sandbox. Only bodies declared application/json (as both SDKs and the CLI send them) are
// read: the body of POST /v1/sandbox/exec decoded as a wire.ExecRequest (unknown fields ignored, as the
// runner does), any other checked to be one JSON value; the runner judges the rest after admission. It
// runs after authentication, so only a holder of a valid token makes the edge buffer a body, at most
// precheckMax bytes; r.Body is replaced by what was read.
func precheck(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	exec := r.Method == http.MethodPost && r.URL.Path == "/v1/sandbox/exec"
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return nil
	}
	if r.ContentLength < 0 || r.ContentLength > precheckMax {
		return nil
	}
	buf := make([]byte, r.ContentLength)
	n, err := io.ReadFull(r.Body, buf)
	r.Body = io.NopCloser(bytes.NewReader(buf[:n]))
	if err != nil {
		return wire.Errorf(wire.InvalidArgument, "the request body ended after %d of the %d bytes its Content-Length announced", n, r.ContentLength)
	}
	if exec {
		var er wire.ExecRequest
		if err := strictjson.Unmarshal(buf, &er); err != nil {
			return wire.JSONError(err, "exec request")
		}
		return nil
	}
	if !strictjson.Valid(buf) {
		return wire.Errorf(wire.InvalidArgument, "the request body is not one JSON value (Content-Type: application/json)")
	}
	return nil
}

// admitChecked is admit for a sandbox API request whose JSON body is checked (precheck) between
// authentication and the budget, so a malformed request is refused as malformed.
func (e *Edge) admitChecked(r *http.Request) (*admitted, error) {
	claims, err := e.authenticate(r.Context(), r)
	if err != nil {
		return nil, err
	}
	if err := precheck(r); err != nil {
		return nil, err
	}
	return e.admitAs(r.Context(), claims, false)
}
