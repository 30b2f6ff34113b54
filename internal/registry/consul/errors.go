package consul

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/warren-mesh/warren/internal/registry"
)

var (
	// ErrBadEntry is returned when an owner key's value is not a valid entry (or an entry given to Register
	// or Hold is incomplete). The value itself is never put into the error: it holds the runner's bearer key.
	ErrBadEntry = errors.New("malformed registry entry")
	// ErrClosed is returned by a Registry after Close.
	ErrClosed = errors.New("registry closed")
)

// serverError is a response Consul gave with a 5xx or 429 status: the server is there but cannot serve
// (no leader, an RPC to the servers failed, rate limited). serverTransport turns such responses into this
// error before the consul/api client sees them, so that every endpoint reports them alike.
type serverError struct {
	code int
	body string
}

func (e *serverError) Error() string {
	return fmt.Sprintf("consul answered %d %s", e.code, e.body)
}

// serverTransport is the Registry's HTTP transport: the pooled transport of consul/api with 5xx and 429
// responses turned into serverError.
type serverTransport struct{ base http.RoundTripper }

func (t serverTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		resp.Body.Close()
		return nil, &serverError{code: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	return resp, nil
}

// wrap gives err the context of what failed and classifies it: the caller's own cancellation is returned as
// ctx.Err(); an unreachable, timed out or failing Consul becomes registry.ErrUnavailable; anything else (a
// refused request, a malformed answer) is kept as it is.
func wrap(ctx context.Context, err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", what, ctxErr)
	}
	if unavailable(err) {
		return fmt.Errorf("%s: %w: %v", what, registry.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// unavailable reports whether err means Consul could not be reached or could not serve: a network error, a
// request timeout (only the Registry's own, since wrap checks the caller's context first), or a serverError.
func unavailable(err error) bool {
	var se *serverError
	var ne net.Error
	return errors.As(err, &se) || errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
