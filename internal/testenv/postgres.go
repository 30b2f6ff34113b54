package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file starts PostgreSQL, the stand-in for CockroachDB in tests (docs/ARCHITECTURE.md#ports-and-adapters): a throwaway server from the
// Debian `postgresql` package's binaries (`make tools`), listening only on 127.0.0.1 and on a Unix socket in
// its own temporary directory, with fsync off and every transaction SERIALIZABLE by default.
//
// Lifecycle. Creating a cluster costs a second or two, so a test binary whose TestMain calls Main shares
// one server among all its tests and hands each PostgreSQL call a fresh database; Main stops the server and
// removes its directory after the tests ran. Without Main, each PostgreSQL call starts a server of its own
// and stops it in t.Cleanup (correct, only slower). Either way the server runs as a child of the test
// binary with a parent-death signal, so a test binary that is killed or panics takes its server with it;
// the directory such a binary leaves behind is removed by the next server start (see sweepStale in
// process.go).
//
// As root, initdb and postgres refuse to run: they are started as the unprivileged `postgres` user the
// Debian package creates (or `nobody`), which owns the temporary directory.

// Main runs the tests of a package that uses PostgreSQL and stops the shared server afterwards. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	shared.enabled.Store(true)
	code := m.Run()
	if s := shared.server(); s != nil {
		if err := s.proc.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop shared PostgreSQL: %v\n", err)
		}
		if err := os.RemoveAll(s.dir); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		}
	}
	os.Exit(code)
}

// PostgreSQL returns the DSN of a new, empty database for t on a running PostgreSQL server: the test
// binary's shared server when TestMain calls Main, else a server of t's own. The database is dropped when t
// ends. Skips under -short; fails, with the command that installs it, when PostgreSQL is missing.
func PostgreSQL(t testing.TB) (dsn string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	if !shared.enabled.Load() {
		return StartPostgreSQL(t).CreateDatabase(t)
	}
	shared.once.Do(func() { shared.srv, shared.err = startServer() })
	if shared.err != nil {
		t.Fatalf("start PostgreSQL: %v", shared.err)
	}
	return shared.srv.CreateDatabase(t)
}

// shared is the test binary's server when Main runs the tests, started by the first PostgreSQL call.
var shared sharedServer

type sharedServer struct {
	enabled atomic.Bool // Main runs the tests
	once    sync.Once
	srv     *PostgreSQLServer
	err     error
}

// server is the shared server if one was started: called once the tests are done.
func (sh *sharedServer) server() *PostgreSQLServer {
	sh.once.Do(func() {}) // no server starts after this
	return sh.srv
}

// PostgreSQLServer is a PostgreSQL server that a test owns: unlike the shared one it may be stopped and
// started again, to test what clients do while the database is down. Its address stays the same across
// restarts, so DSNs handed out stay valid. Methods may be called from one goroutine at a time.
type PostgreSQLServer struct {
	bin  string // directory holding initdb and postgres
	dir  string // temporary directory: data, socket, log
	port int
	cred *syscall.Credential // nil when not root
	proc proc
	dbs  atomic.Int64
}

// StartPostgreSQL starts a PostgreSQL server for t alone and stops it, removing its files, when t ends.
// Skips under -short; fails when PostgreSQL is missing.
func StartPostgreSQL(t testing.TB) *PostgreSQLServer {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	s, err := startServer()
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	s.proc.stopAtCleanup(t, func() error { return os.RemoveAll(s.dir) })
	return s
}

// Addr is the server's TCP address, 127.0.0.1:port.
func (s *PostgreSQLServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// DSN is the URL of database db on the server.
func (s *PostgreSQLServer) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr(), db)
}

var dbNameUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// CreateDatabase creates a new, empty database named after t and returns its DSN. The database is dropped,
// closing whatever connections remain, when t ends (unless the server is stopped by then).
func (s *PostgreSQLServer) CreateDatabase(t testing.TB) (dsn string) {
	t.Helper()
	name := strings.Trim(dbNameUnsafe.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	name = fmt.Sprintf("t%d_%s", s.dbs.Add(1), name)
	if len(name) > 63 { // NAMEDATALEN - 1
		name = name[:63]
	}
	if err := s.admin(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if !s.Running() {
			return
		}
		if err := s.admin(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

// Running reports whether the server process is up.
func (s *PostgreSQLServer) Running() bool { return s.proc.running() }

// Stop shuts the server down (a fast shutdown: sessions are ended, committed data is kept). Clients see
// connection errors until Start.
func (s *PostgreSQLServer) Stop(t testing.TB) {
	t.Helper()
	s.proc.stopOrFatal(t)
}

// Start starts a stopped server again on the same address and data.
func (s *PostgreSQLServer) Start(t testing.TB) {
	t.Helper()
	s.proc.restartOrFatal(t, s.start)
}

// startServer creates a cluster in a new temporary directory and starts it on a free port.
func startServer() (*PostgreSQLServer, error) {
	bin, err := findPostgres()
	if err != nil {
		return nil, err
	}
	cred, err := unprivileged()
	if err != nil {
		return nil, err
	}
	dir, err := ownedTempDir(pgStalePrefix, os.RemoveAll)
	if err != nil {
		return nil, err
	}
	s := &PostgreSQLServer{
		bin:  bin,
		dir:  dir,
		cred: cred,
		proc: proc{
			title:   "PostgreSQL",
			stopSig: syscall.SIGINT, // a fast shutdown
			grace:   30 * time.Second,
			logPath: filepath.Join(dir, pgLogFile),
		},
	}
	if err := s.initdb(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	err = withFreePorts(1, func(p []int) error {
		s.port = p[0]
		return s.start()
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// The layout of the temporary directory (and ownerFile).
const (
	pgStalePrefix = "warren-pg-"
	dataDir       = "data"
	socketDir     = "sock"
	pgLogFile     = "postgres.log"
)

func (s *PostgreSQLServer) initdb() error {
	if err := os.Mkdir(filepath.Join(s.dir, socketDir), 0o700); err != nil {
		return err
	}
	if s.cred != nil {
		for _, p := range []string{s.dir, filepath.Join(s.dir, socketDir)} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return err
			}
		}
	}
	cmd := s.command(filepath.Join(s.bin, "initdb"), "-D", filepath.Join(s.dir, dataDir),
		"-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// start runs postgres in the foreground as a child of the test binary and waits until it accepts
// connections.
func (s *PostgreSQLServer) start() error {
	cmd := s.command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, dataDir),
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+filepath.Join(s.dir, socketDir),
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "default_transaction_isolation=serializable",
		"-c", "max_connections=300",
		"-c", "shared_buffers=64MB",
		"-c", "max_pred_locks_per_transaction=256",
	)
	// If the test binary dies without stopping the server (killed, timed out), the postmaster gets SIGQUIT
	// (immediate shutdown) and its backends follow it.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	if err := s.proc.start(cmd); err != nil {
		return err
	}
	selectOne := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return s.admin(ctx, "SELECT 1")
	}
	if err := s.proc.awaitReady(30*time.Second, 20*time.Millisecond, selectOne); err != nil {
		return fmt.Errorf("postgres on port %d: %w", s.port, err)
	}
	return nil
}

// admin runs one statement as the superuser on the maintenance database.
func (s *PostgreSQLServer) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// command runs name as the unprivileged user when the test runs as root.
func (s *PostgreSQLServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"LC_ALL=C", "TZ=UTC", "PATH=" + s.bin + ":/usr/bin:/bin"}
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

const installHint = "PostgreSQL is not installed (need initdb and postgres in PATH or /usr/lib/postgresql/*/bin): run `make tools` (Debian package postgresql)"

// findPostgres returns the directory holding initdb and postgres: the one of initdb in PATH (resolving
// Debian's symlinks), else the newest /usr/lib/postgresql/*/bin.
func findPostgres() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(found, func(a, b string) int { return majorOf(b) - majorOf(a) })
	dirs = append(dirs, found...)
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New(installHint)
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// unprivileged returns the credentials to run PostgreSQL with: nil when the test is not root, else those of
// the `postgres` user (or `nobody`), since initdb and postgres refuse to run as root.
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("running as root and found no unprivileged user (postgres or nobody) to run PostgreSQL as: " +
		"create one (`make tools` installs the postgresql package, which creates postgres) or run the tests as another user")
}
