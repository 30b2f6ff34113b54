package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/warren-mesh/warren/internal/blob"
)

// ErrAccessDenied is returned, wrapped with the operation, the key and the server's code and message, when
// the server refuses the credentials, the request's signature or the permission (HTTP 401 or 403): a
// configuration problem, not an outage, so retrying does not help.
var ErrAccessDenied = errors.New("s3 access denied")

// errorClass is what an S3 error means for the port.
type errorClass int

const (
	classOther errorClass = iota
	classNotFound
	classPrecondition
	classDenied
	classUnavailable
	classNoBucket
	classRange
)

// classify sorts an error the SDK returned for a request, a HEAD request if head. The caller's context
// must be checked first: a cancelled call's error is the caller's doing, not the store's.
func classify(err error, head bool) errorClass {
	// No response: the request could not be sent or its response was cut off (connection refused or
	// reset, DNS, TLS, no response headers within the timeout), after the retryer gave up. The SDK wraps
	// such failures in a response error of status 0, so this comes first.
	var send *smithyhttp.RequestSendError
	var netErr net.Error
	if errors.As(err, &send) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) {
		return classUnavailable
	}
	var status interface{ HTTPStatusCode() int }
	if !errors.As(err, &status) || status.HTTPStatusCode() == 0 {
		return classOther
	}
	code := ""
	var api smithy.APIError
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	switch s := status.HTTPStatusCode(); {
	case code == "NoSuchBucket":
		return classNoBucket
	case code == "XAdminUserNotFound":
		// versitygw in single-account mode answers an unknown access key with this 404 instead of S3's
		// 403 InvalidAccessKeyId.
		return classDenied
	case code == "NoSuchKey" || head && s == http.StatusNotFound:
		// A HEAD response carries no body, so a HeadObject 404 says no more (also when the bucket is
		// missing). Any other 404 without S3's NoSuchKey (a proxy's page) is not a missing object:
		// taking it for one would make a misconfigured endpoint look like an empty store.
		return classNotFound
	case s == http.StatusPreconditionFailed || code == "PreconditionFailed" ||
		code == "ConditionalRequestConflict":
		// 409 ConditionalRequestConflict: another conditional write to the key was in flight.
		return classPrecondition
	case s == http.StatusRequestedRangeNotSatisfiable || code == "InvalidRange":
		return classRange
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return classDenied
	case s >= 500 || s == http.StatusTooManyRequests || code == "SlowDown":
		return classUnavailable
	}
	return classOther
}

// wrapErr turns an SDK error of operation op on key into the port's errors. ctx is the caller's context;
// timedOut reports whether this store's own deadline for the call expired.
func (s *Store) wrapErr(ctx context.Context, op, key string, err error, timedOut bool) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, cerr) {
			return fmt.Errorf("%s %s: %w", op, key, err)
		}
		return fmt.Errorf("%s %s: %w: %w", op, key, cerr, err)
	}
	if timedOut || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %w: no answer within %v: %w", op, key, blob.ErrUnavailable, s.cfg.Timeout, err)
	}
	switch classify(err, op == opExists || op == opStat) {
	case classNotFound:
		return fmt.Errorf("%s %s: %w", op, key, blob.ErrNotFound)
	case classPrecondition:
		return fmt.Errorf("%s %s: %w: %w", op, key, blob.ErrPrecondition, err)
	case classDenied:
		return fmt.Errorf("%s %s: %w (check the access key, secret and the bucket policy of %s): %w",
			op, key, ErrAccessDenied, s.cfg.Bucket, err)
	case classUnavailable:
		return fmt.Errorf("%s %s: %w: %w", op, key, blob.ErrUnavailable, err)
	case classNoBucket:
		return fmt.Errorf("%s %s: bucket %s does not exist: %w", op, key, s.cfg.Bucket, err)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}
