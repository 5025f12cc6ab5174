// Package pgtest is what tests of the real PostgreSQL server share:
// finding the server (a missing one fails the test when CI=true and skips
// it elsewhere), a database of the test's own, created and dropped by the
// test, and a lock across test processes (internal/testlock). A test that
// restarts the server takes the lock exclusively (Disrupt), every other
// PostgreSQL test takes it shared (Use, NewDatabase), so no test sees
// another package's restart. The lock has no gate.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq/internal/testlock"
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

// restartWait bounds the wait for the server to come back after Restart.
const restartWait = 10 * time.Minute

// setupTimeout bounds creating and dropping a database.
const setupTimeout = time.Minute

var server = &testlock.Server{
	Name: "PostgreSQL", URLEnv: URLEnv, URLDefault: URLDefault, Port: "5432", LockFile: LockFile,
}

// URL is the server's URL.
func URL() string { return server.URL() }

// Use checks that the server answers and holds the lock shared until t
// ends. It returns the server's URL.
func Use(t testing.TB) string {
	t.Helper()
	return server.Use(t)
}

// Disrupt checks that the server answers and holds the lock exclusively
// until t ends: no other PostgreSQL test, in any package, runs meanwhile.
// A test that takes it must not also call Use or NewDatabase before it.
func Disrupt(t testing.TB) string {
	t.Helper()
	return server.Disrupt(t)
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
	deadline := time.Now().Add(restartWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, URL())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: PostgreSQL not back %v after its restart: %v", restartWait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
