package cockroachdb

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/cockroachdb/cockroach-go/v2/crdb"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// Class is what a database error means to the caller. Classify is the one place Warren reads SQLSTATEs.
type Class int

const (
	// Other: none of the classes below — a constraint other than uniqueness, a syntax error, a value out of
	// range, a bug. Running the same statement again fails the same way. Also the class of nil.
	Other Class = iota
	// Retryable: 40001 serialization_failure or 40P01 deadlock_detected. The transaction was rolled back and
	// may succeed when run again; ExecuteTx does so. Seen by callers only when ExecuteTx gave up.
	Retryable
	// Conflict: 23505 unique_violation, a row with that key exists.
	Conflict
	// Unavailable: the server could not be reached or went away — a failed connection attempt
	// (*pgconn.ConnectError), a network error or timeout, SQLSTATE class 08 (connection exception), 57P01
	// admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now, 53300 too_many_connections — or the
	// pool is closed. Nothing was committed unless the error is also Ambiguous.
	Unavailable
	// Ambiguous: the connection failed during COMMIT (crdb.AmbiguousCommitError, ErrAmbiguousCommit, or
	// CockroachDB's 40003 statement_completion_unknown), so the transaction may or may not have committed.
	// Only an idempotent transaction may be run again (TxOptions.Idempotent).
	Ambiguous
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Conflict:
		return "conflict"
	case Unavailable:
		return "unavailable"
	case Ambiguous:
		return "ambiguous"
	}
	return "other"
}

// ErrAmbiguousCommit: the connection failed while a COMMIT was in flight on PostgreSQL; whether the
// transaction committed is unknown. (On CockroachDB, crdb.ExecuteTx reports crdb.AmbiguousCommitError.)
var ErrAmbiguousCommit = errors.New("transaction outcome unknown: connection failed during commit")

// SQLSTATEs Classify reads.
const (
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeCompletionUnknown    = "40003" // CockroachDB: statement_completion_unknown
	codeUniqueViolation      = "23505"
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	codeTooManyConnections   = "53300"
	classConnectionException = "08"
)

// Classify says what err, returned by pgx or by ExecuteTx, means; errors wrapped with %w are unwrapped.
func Classify(err error) Class {
	if err == nil {
		return Other
	}
	var ambiguous *crdb.AmbiguousCommitError
	if errors.As(err, &ambiguous) || errors.Is(err, ErrAmbiguousCommit) {
		return Ambiguous
	}
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return Unavailable
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == codeSerializationFailure || code == codeDeadlockDetected:
			return Retryable
		case code == codeCompletionUnknown:
			return Ambiguous
		case code == codeUniqueViolation:
			return Conflict
		case strings.HasPrefix(code, classConnectionException), code == codeAdminShutdown,
			code == codeCrashShutdown, code == codeCannotConnectNow, code == codeTooManyConnections:
			return Unavailable
		}
		return Other
	}
	var netErr net.Error
	switch {
	case errors.As(err, &netErr), pgconn.Timeout(err), pgconn.SafeToRetry(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, puddle.ErrClosedPool):
		return Unavailable
	}
	return Other
}
