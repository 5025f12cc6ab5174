// Package pgtest is what tests of the real PostgreSQL server share:
// finding the server (a missing one fails the test when CI=true and skips
// it elsewhere), a database of the test's own, created and dropped by the
// test, and a lock across test processes. `go test ./...` runs packages in
// parallel processes on one server; a test that restarts the server takes
// the lock exclusively (Disrupt), every other PostgreSQL test takes it
// shared (Use, NewDatabase), so no test sees another package's restart.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// URLEnv names the environment variable that overrides URLDefault: the
// URL of a database the tests may connect to as a user that creates
// databases.
const URLEnv = "CAPTCHAQ_PG_URL"

// URLDefault is the server tests use unless URLEnv says otherwise (the
// local cluster, trust authentication).
const URLDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// LockFile is the name of the lock file in os.TempDir().
const LockFile = "captchaq-postgres-test.lock"

// lockWait bounds the wait for the lock: a disruptive test runs for a
// minute or two, so longer means something hangs.
const lockWait = 10 * time.Minute

// setupTimeout bounds creating and dropping a database.
const setupTimeout = time.Minute

// URL is the server's URL.
func URL() string {
	if u := os.Getenv(URLEnv); u != "" {
		return u
	}
	return URLDefault
}

// Use checks that the server answers and holds the lock shared until t
// ends. It returns the server's URL.
func Use(t testing.TB) string {
	t.Helper()
	return acquire(t, syscall.LOCK_SH)
}

// Disrupt checks that the server answers and holds the lock exclusively
// until t ends: no other PostgreSQL test, in any package, runs meanwhile.
// A test that takes it must not also call Use or NewDatabase before it.
func Disrupt(t testing.TB) string {
	t.Helper()
	return acquire(t, syscall.LOCK_EX)
}

// NewDatabase holds the lock shared (Use), creates an empty database of
// its own and returns its URL; the database is dropped when t ends, with
// any connection still open to it.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return CreateDatabase(t, Use(t))
}

// CreateDatabase creates an empty database on the server at admin (a URL
// from Use or Disrupt) and returns its URL; it is dropped when t ends.
func CreateDatabase(t testing.TB, admin string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "captchaq_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", redacted(admin), err)
	}
	defer conn.Close(context.Background())
	// template0: nobody connects to it, so parallel creates never find
	// their template in use.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", URLEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

func redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

func acquire(t testing.TB, how int) string {
	t.Helper()
	u := URL()
	path := filepath.Join(os.TempDir(), LockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("postgres test lock %s: %v", path, err)
	}
	deadline := time.Now().Add(lockWait)
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			t.Fatalf("postgres test lock %s: %v", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("postgres test lock %s: still taken after %v; is a test hanging?", path, lockWait)
		}
		if !logged {
			t.Logf("waiting for the postgres test lock %s (a test elsewhere restarts the server or uses it)", path)
			logged = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	// LOCK_UN, not only Close: a child process this test is starting holds
	// a copy of the descriptor until its exec, and would keep the lock.
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
	reachable(t, u)
	return u
}

// reachable fails (CI=true) or skips t when nothing listens at u's host.
func reachable(t testing.TB, u string) {
	t.Helper()
	host := "127.0.0.1:5432"
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		host = p.Host
		if p.Port() == "" {
			host = net.JoinHostPort(p.Hostname(), "5432")
		}
	}
	nc, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is not reachable at %s and CI=true: %v", host, err)
		}
		t.Skipf("skipping: PostgreSQL is not reachable at %s (%v); start it, or set CI=true to make this a failure", host, err)
	}
	nc.Close()
}

// Restart restarts the local cluster (pg_ctlcluster; the test must hold
// Disrupt) and waits until it accepts connections again. It may be
// called from any goroutine.
func Restart() error {
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) != 1 {
		return fmt.Errorf("pgtest: Restart needs one cluster version in /etc/postgresql: %v", err)
	}
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", versions[0].Name(), "main", "restart").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: restart PostgreSQL: %v\n%s", err, out)
	}
	deadline := time.Now().Add(lockWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, URL())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: PostgreSQL not back %v after its restart: %v", lockWait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
