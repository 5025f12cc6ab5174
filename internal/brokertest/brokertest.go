// Package brokertest is what tests of the real RabbitMQ broker share:
// finding the broker (a missing one fails the test when CI=true and skips
// it elsewhere) and a lock across test processes. `go test ./...` runs
// packages in parallel processes on one broker; a test that restarts the
// broker or closes its connections takes the lock exclusively (Disrupt),
// every other broker test takes it shared (Use), so no test sees another
// package's disruption.
//
// A gate in front of the lock (GateFile) lets a disruptive test in
// before the shared holders that come after it: it takes the gate
// exclusively, waits for the holders already in, and lets the gate go
// once it has the lock; a shared taker passes through the gate shared.
// Without it, another package's parallel tests held the shared lock in
// turns, overlapping for minutes, and the disruptive test waited for all
// of them.
package brokertest

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// GateFile is the name of the lock file in os.TempDir() that a
// disruptive test holds exclusively while it waits for LockFile, so
// that no shared taker gets in before it.
const GateFile = "captchaq-broker-test.gate"

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

// held counts the shared locks each test of this process holds, by test
// name: a test (or a subtest of one) that holds the lock already takes it
// again without the gate, as a disruptive test waiting at the gate waits
// for it to end (a test that calls Use once per step, a parent test
// that runs a subtest).
var held = struct {
	sync.Mutex
	by map[string]int
}{by: map[string]int{}}

// holds reports whether name or a test it is a subtest of holds the lock
// in this process.
func holds(name string) bool {
	held.Lock()
	defer held.Unlock()
	for {
		if held.by[name] > 0 {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

func acquire(t testing.TB, how int) string {
	t.Helper()
	u := URL()
	t.Cleanup(lock(t, how))
	// Checked under the lock: a broker another test restarts is down
	// only while that test holds the lock exclusively.
	reachable(t, u)
	return u
}

// lock takes the lock how for t, through the gate unless t holds it
// already (shared), and returns its release.
func lock(t testing.TB, how int) (release func()) {
	t.Helper()
	deadline := time.Now().Add(lockWait)
	var gate *os.File
	if how == syscall.LOCK_EX || !holds(t.Name()) {
		gate = lockFile(t, GateFile, how, deadline)
	}
	f := lockFile(t, LockFile, how, deadline)
	if gate != nil {
		_ = syscall.Flock(int(gate.Fd()), syscall.LOCK_UN)
		gate.Close()
	}
	name := t.Name()
	if how == syscall.LOCK_SH {
		held.Lock()
		held.by[name]++
		held.Unlock()
	}
	// LOCK_UN, not only Close: a child process this test is starting holds
	// a copy of the descriptor until its exec, and would keep the lock.
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		if how == syscall.LOCK_SH {
			held.Lock()
			if held.by[name]--; held.by[name] == 0 {
				delete(held.by, name)
			}
			held.Unlock()
		}
	}
}

// lockFile takes the flock how on file in os.TempDir(), waiting until
// deadline.
func lockFile(t testing.TB, file string, how int, deadline time.Time) *os.File {
	t.Helper()
	path := filepath.Join(os.TempDir(), file)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("broker test lock %s: %v", path, err)
	}
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return f
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
