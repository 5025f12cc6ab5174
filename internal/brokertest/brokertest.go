// Package brokertest is what tests of the real RabbitMQ broker share:
// finding the broker (a missing one fails the test when CI=true and skips
// it elsewhere) and a lock across test processes (internal/testlock). A
// test that restarts the broker or closes its connections takes the lock
// exclusively (Disrupt), every other broker test takes it shared (Use), so
// no test sees another package's disruption. The lock has a gate
// (GateFile): a disruptive test goes before the shared takers that come
// after it.
package brokertest

import (
	"testing"

	"github.com/captchaq/captchaq/internal/testlock"
)

// URLEnv names the environment variable that overrides URLDefault.
const URLEnv = "CAPTCHAQ_AMQP_URL"

// URLDefault is the broker tests use unless URLEnv says otherwise.
const URLDefault = "amqp://guest:guest@127.0.0.1:5672/"

// LockFile is the name of the lock file in os.TempDir().
const LockFile = "captchaq-broker-test.lock"

// GateFile is the name of the lock file in os.TempDir() that a
// disruptive test holds exclusively while it waits for LockFile, so
// that no shared taker gets in before it.
const GateFile = "captchaq-broker-test.gate"

var broker = &testlock.Server{
	Name: "RabbitMQ", URLEnv: URLEnv, URLDefault: URLDefault, Port: "5672",
	LockFile: LockFile, GateFile: GateFile,
}

// URL is the broker's URL.
func URL() string { return broker.URL() }

// Use checks that the broker answers and holds the lock shared until t
// ends. It returns the broker's URL.
func Use(t testing.TB) string {
	t.Helper()
	return broker.Use(t)
}

// Disrupt checks that the broker answers and holds the lock exclusively
// until t ends: no other broker test, in any package, runs meanwhile. A
// test that takes it must not also call Use.
func Disrupt(t testing.TB) string {
	t.Helper()
	return broker.Disrupt(t)
}
