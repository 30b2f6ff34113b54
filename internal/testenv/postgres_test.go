package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryString(t testing.TB, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestPostgreSQL(t *testing.T) {
	ctx := context.Background()
	a, b := connect(t, PostgreSQL(t)), connect(t, PostgreSQL(t))
	for _, tc := range []struct{ setting, want string }{
		{"default_transaction_isolation", "serializable"},
		{"transaction_isolation", "serializable"},
		{"fsync", "off"},
		{"listen_addresses", "127.0.0.1"},
	} {
		if got := queryString(t, a, "SHOW "+tc.setting); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.setting, got, tc.want)
		}
	}
	// Each call is a database of its own.
	if da, db := queryString(t, a, "SELECT current_database()"), queryString(t, b, "SELECT current_database()"); da == db {
		t.Fatalf("two calls share database %s", da)
	}
	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "SELECT * FROM only_in_a"); err == nil {
		t.Fatal("a table created in one database is visible in the other")
	}
	// One server, shared by the test binary, not running as root.
	srv := shared.srv
	if got := queryString(t, a, "SHOW port"); got != strconv.Itoa(srv.port) {
		t.Errorf("port %s, want the shared server's %d", got, srv.port)
	}
	if uid := processUID(t, srv.proc.cmd.Process.Pid); uid == 0 {
		t.Error("postgres runs as root")
	}
	if got, want := queryString(t, a, "SHOW unix_socket_directories"), filepath.Join(srv.dir, socketDir); got != want {
		t.Errorf("unix_socket_directories = %s, want %s", got, want)
	}
}

// Databases are dropped when their test ends.
func TestPostgreSQLDropsDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	var name string
	t.Run("user", func(t *testing.T) {
		name = queryString(t, connect(t, PostgreSQL(t)), "SELECT current_database()")
	})
	conn := connect(t, shared.srv.DSN("postgres"))
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s outlived its test", name)
	}
}

func TestPostgreSQLServerRestart(t *testing.T) {
	ctx := context.Background()
	srv := StartPostgreSQL(t)
	dsn := srv.CreateDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	srv.Stop(t)
	if srv.Running() {
		t.Fatal("running after Stop")
	}
	if c, err := pgx.Connect(ctx, dsn); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
	srv.Start(t)
	if got := queryString(t, connect(t, dsn), "SELECT x::text FROM kept"); got != "42" {
		t.Fatalf("after restart: %s, want 42", got)
	}
}

// The shared server does not outlive its test binary: Main stops it and removes its directory, and a
// binary killed outright takes its server down with it (the parent-death signal), leaving a directory the
// next start sweeps away.
func TestPostgreSQLLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	// Orphans of the killed child are reparented to this process, which reaps them (waitGone): under a
	// container init that does not reap, they would otherwise stay zombies.
	setSubreaper(t, true)
	t.Cleanup(func() { setSubreaper(t, false) })
	for _, mode := range []string{"exit", "kill"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestPostgreSQLChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "WARREN_TESTENV_CHILD="+mode)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var (
				pid  int
				dir  string
				seen []string
			)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				seen = append(seen, sc.Text())
				if _, err := fmt.Sscanf(sc.Text(), "PGINFO %d %s", &pid, &dir); err == nil {
					break
				}
			}
			if pid == 0 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child did not report its server:\n%s", strings.Join(seen, "\n"))
			}
			if mode == "kill" {
				cmd.Process.Kill()
			}
			go func() { // drain, so the child never blocks on a full pipe
				for sc.Scan() {
				}
			}()
			err = cmd.Wait()
			if mode == "exit" && err != nil {
				t.Fatalf("child: %v", err)
			}
			waitGone(t, pid)
			_, err = os.Stat(dir)
			switch mode {
			case "exit":
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("directory %s left behind: %v", dir, err)
				}
			case "kill":
				if err != nil {
					t.Fatalf("a killed child's directory: %v, want it left for the sweep", err)
				}
				sweepStale(pgStalePrefix, os.RemoveAll)
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("sweep left %s: %v", dir, err)
				}
			}
		})
	}
}

// TestPostgreSQLChild is the test binary's child in TestPostgreSQLLeavesNothingBehind.
func TestPostgreSQLChild(t *testing.T) {
	mode := os.Getenv("WARREN_TESTENV_CHILD")
	if mode == "" {
		t.Skip("runs only as TestPostgreSQLLeavesNothingBehind's child")
	}
	connect(t, PostgreSQL(t))
	fmt.Printf("PGINFO %d %s\n", shared.srv.proc.cmd.Process.Pid, shared.srv.dir)
	if mode == "kill" {
		time.Sleep(time.Minute) // until killed
	}
}

// waitGone polls until process pid is gone, reaping it if it became this process's child.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // reaps it once it is our exited child
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres (pid %d) still there", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func setSubreaper(t *testing.T, on bool) {
	t.Helper()
	const prSetChildSubreaper = 36
	v := uintptr(0)
	if on {
		v = 1
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, v, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
}

func processUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	t.Fatal("no Uid in /proc status")
	return -1
}
