// Package brokertest is what tests of the real RabbitMQ broker share:
// finding the broker (a missing one fails the test when CI=true and skips
// it elsewhere) and a lock across test processes. `go test ./...` runs
// packages in parallel processes on one broker; a test that restarts the
// broker or closes its connections takes the lock exclusively (Disrupt),
// every other broker test takes it shared (Use), so no test sees another
// package's disruption.
package brokertest

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// URLEnv names the environment variable that overrides URLDefault.
const URLEnv = "CAPTCHAQ_AMQP_URL"

// URLDefault is the broker tests use unless URLEnv says otherwise.
const URLDefault = "amqp://guest:guest@127.0.0.1:5672/"

// LockFile is the name of the lock file in os.TempDir().
const LockFile = "captchaq-broker-test.lock"

// lockWait bounds the wait for the lock: a disruptive test runs for a
// minute or two, so longer means something hangs.
const lockWait = 10 * time.Minute

// URL is the broker's URL.
func URL() string {
	if u := os.Getenv(URLEnv); u != "" {
		return u
	}
	return URLDefault
}

// Use checks that the broker answers and holds the lock shared until t
// ends. It returns the broker's URL.
func Use(t testing.TB) string {
	t.Helper()
	return acquire(t, syscall.LOCK_SH)
}

// Disrupt checks that the broker answers and holds the lock exclusively
// until t ends: no other broker test, in any package, runs meanwhile. A
// test that takes it must not also call Use.
func Disrupt(t testing.TB) string {
	t.Helper()
	return acquire(t, syscall.LOCK_EX)
}

func acquire(t testing.TB, how int) string {
	t.Helper()
	u := URL()
	path := filepath.Join(os.TempDir(), LockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("broker test lock %s: %v", path, err)
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
			t.Fatalf("broker test lock %s: %v", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("broker test lock %s: still taken after %v; is a test hanging?", path, lockWait)
		}
		if !logged {
			t.Logf("waiting for the broker test lock %s (a test elsewhere restarts the broker or uses it)", path)
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
	// Checked under the lock: a broker another test restarts is down
	// only while that test holds the lock exclusively.
	reachable(t, u)
	return u
}

// reachable fails (CI=true) or skips t when nothing listens at u's host.
func reachable(t testing.TB, u string) {
	t.Helper()
	host := "127.0.0.1:5672"
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		host = p.Host
		if p.Port() == "" {
			host = net.JoinHostPort(p.Hostname(), "5672")
		}
	}
	nc, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ is not reachable at %s and CI=true: %v", host, err)
		}
		t.Skipf("skipping: RabbitMQ is not reachable at %s (%v); start it, or set CI=true to make this a failure", host, err)
	}
	nc.Close()
}
