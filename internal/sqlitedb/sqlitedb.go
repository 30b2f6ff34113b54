// Package sqlitedb opens the embedded SQLite databases behind warren dev's adapters (billing/sqlite,
// scheduler/sqlite) with one set of settings, and applies their versioned schemas. It uses the pure-Go
// modernc.org/sqlite driver, so the binary needs no cgo.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// BusyTimeout is how long a connection waits for another connection's (or process's) write lock before
// failing with SQLITE_BUSY.
const BusyTimeout = 5 * time.Second

// maxOpenConns bounds the pool: SQLite has one writer at a time, so more connections only add busy-wait
// retries, while a few still let readers proceed beside a writer under WAL.
const maxOpenConns = 4

// Open opens (creating if needed) the SQLite database file at path with the settings every Warren adapter
// relies on: WAL journal (readers never block the writer), a busy timeout so concurrent writers — in this
// process or another — wait instead of failing, foreign keys on, synchronous=NORMAL (durable at checkpoints,
// never corrupt), and BEGIN IMMEDIATE for every transaction so a transaction takes the write lock up front
// and cannot fail later on a lock upgrade. The path must name a file; ":memory:" is refused because each
// pooled connection would see its own empty database.
func Open(ctx context.Context, path string) (*sql.DB, error) {
	switch {
	case path == "":
		return nil, errors.New("open sqlite: empty path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("open sqlite %s: want a plain file path", path)
	case strings.ContainsRune(path, '?'):
		return nil, fmt.Errorf("open sqlite %s: path contains '?'", path)
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxOpenConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return db, nil
}
