// Package testlock is what the tests of a server that test processes
// share take before they use it (internal/brokertest for RabbitMQ,
// internal/pgtest for PostgreSQL): its URL, a lock across processes and
// the check that it answers. `go test ./...` runs packages in parallel
// processes on one server; a test that restarts the server or drops its
// connections takes the lock exclusively (Disrupt), every other test of
// that server takes it shared (Use), so no test sees another package's
// disruption. The lock is a flock on a file in os.TempDir(): what takes it
// outside the tests (captchaq bench's faults, bench/fronts.sh) names the
// same file.
//
// A gate in front of the lock (Server.GateFile) lets a disruptive test in
// before the shared takers that come after it: it takes the gate
// exclusively, waits for the holders already in, and lets the gate go once
// it has the lock; a shared taker passes through the gate shared. Without
// it, another package's parallel tests hold the shared lock in turns,
// overlapping for minutes, and the disruptive test waits for all of them.
package testlock

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

// lockWait bounds the wait for the lock: a disruptive test runs for a
// minute or two, so longer means something hangs.
const lockWait = 10 * time.Minute

// Server is a server that tests in several processes share, and its lock.
// Its fields are set once, before the first Use or Disrupt.
type Server struct {
	// Name names the server in messages: "RabbitMQ", "PostgreSQL".
	Name string
	// URLEnv names the environment variable that overrides URLDefault.
	URLEnv, URLDefault string
	// Port is the port dialed when the URL names none.
	Port string
	// LockFile is the name of the lock file in os.TempDir().
	LockFile string
	// GateFile is the name of the gate's file in os.TempDir(); "" for a
	// lock without a gate.
	GateFile string

	// held counts the shared locks each test of this process holds, by
	// test name: a test (or a subtest of one) that holds the lock already
	// takes it again without the gate, as a disruptive test waiting at the
	// gate waits for it to end (a test that calls Use once per step, a
	// parent test that runs a subtest).
	mu   sync.Mutex
	held map[string]int
}

// URL is the server's URL: URLEnv's value, else URLDefault.
func (s *Server) URL() string {
	if u := os.Getenv(s.URLEnv); u != "" {
		return u
	}
	return s.URLDefault
}

// Use checks that the server answers and holds the lock shared until t
// ends. It returns the server's URL.
func (s *Server) Use(t testing.TB) string {
	t.Helper()
	return s.acquire(t, syscall.LOCK_SH)
}

// Disrupt checks that the server answers and holds the lock exclusively
// until t ends: no other test of the server, in any package, runs
// meanwhile.
func (s *Server) Disrupt(t testing.TB) string {
	t.Helper()
	return s.acquire(t, syscall.LOCK_EX)
}

func (s *Server) acquire(t testing.TB, how int) string {
	t.Helper()
	u := s.URL()
	t.Cleanup(s.lock(t, how))
	// Checked under the lock: a server another test restarts is down
	// only while that test holds the lock exclusively.
	s.reachable(t, u)
	return u
}

// holds reports whether name or a test it is a subtest of holds the lock
// in this process.
func (s *Server) holds(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.held[name] > 0 {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// lock takes the lock how for t, through the gate (if there is one) unless
// t holds it already (shared), and returns its release.
func (s *Server) lock(t testing.TB, how int) (release func()) {
	t.Helper()
	deadline := time.Now().Add(lockWait)
	var gate *os.File
	if s.GateFile != "" && (how == syscall.LOCK_EX || !s.holds(t.Name())) {
		gate = s.lockFile(t, s.GateFile, how, deadline)
	}
	f := s.lockFile(t, s.LockFile, how, deadline)
	if gate != nil {
		_ = syscall.Flock(int(gate.Fd()), syscall.LOCK_UN)
		gate.Close()
	}
	name := t.Name()
	if how == syscall.LOCK_SH {
		s.mu.Lock()
		if s.held == nil {
			s.held = map[string]int{}
		}
		s.held[name]++
		s.mu.Unlock()
	}
	// LOCK_UN, not only Close: a child process this test is starting holds
	// a copy of the descriptor until its exec, and would keep the lock.
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		if how == syscall.LOCK_SH {
			s.mu.Lock()
			if s.held[name]--; s.held[name] == 0 {
				delete(s.held, name)
			}
			s.mu.Unlock()
		}
	}
}

// lockFile takes the flock how on file in os.TempDir(), waiting until
// deadline.
func (s *Server) lockFile(t testing.TB, file string, how int, deadline time.Time) *os.File {
	t.Helper()
	path := filepath.Join(os.TempDir(), file)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("%s test lock %s: %v", s.Name, path, err)
	}
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return f
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			t.Fatalf("%s test lock %s: %v", s.Name, path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("%s test lock %s: still taken after %v; is a test hanging?", s.Name, path, lockWait)
		}
		if !logged {
			t.Logf("waiting for the %s test lock %s (a test elsewhere restarts the server or uses it)", s.Name, path)
			logged = true
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reachable fails (CI=true) or skips t when nothing listens at u's host.
func (s *Server) reachable(t testing.TB, u string) {
	t.Helper()
	host := net.JoinHostPort("127.0.0.1", s.Port)
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		host = p.Host
		if p.Port() == "" {
			host = net.JoinHostPort(p.Hostname(), s.Port)
		}
	}
	nc, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not reachable at %s and CI=true: %v", s.Name, host, err)
		}
		t.Skipf("skipping: %s is not reachable at %s (%v); start it, or set CI=true to make this a failure", s.Name, host, err)
	}
	nc.Close()
}
