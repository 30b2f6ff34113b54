package spool

import "errors"

var (
	// ErrClosed: the spool was used after Close.
	ErrClosed = errors.New("usage spool closed")
	// ErrLocked: another Spool, in this process or another, has the file open.
	ErrLocked = errors.New("usage spool in use")
	// ErrCorrupt: a line before the file's last one cannot be read. A torn last line (a crash during an
	// append) is not corruption: Open drops it.
	ErrCorrupt = errors.New("usage spool corrupt")
	// ErrNoReserver: Reserve, Settle or Release on a spool whose ledger holds no budget.
	ErrNoReserver = errors.New("ledger does not hold budget")
)
