package testlock_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/internal/testlock"
)

// tryLock reports whether file in os.TempDir() can be taken with how right
// now, through a file of its own (as another process would), and lets it
// go.
func tryLock(t *testing.T, file string, how int) bool {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), file), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if err != nil && err != syscall.EWOULDBLOCK {
		t.Fatal(err)
	}
	return err == nil
}

// The broker's and PostgreSQL's locks: Use takes each one's file shared,
// Disrupt exclusively, and each lets it go when its test ends.
func TestUseSharesAndDisruptExcludes(t *testing.T) {
	// Hold the real locks shared for the whole test (PostgreSQL's first),
	// so no other test process restarts a server while this one checks it
	// is reachable.
	pgtest.Use(t)
	brokertest.Use(t)
	t.Setenv("TMPDIR", t.TempDir()) // lock files no other test process sees
	servers := []struct {
		name, file   string
		url          func() string
		use, disrupt func(testing.TB) string
	}{
		{"broker", "captchaq-broker-test.lock", brokertest.URL, brokertest.Use, brokertest.Disrupt},
		{"postgres", "captchaq-postgres-test.lock", pgtest.URL, pgtest.Use, pgtest.Disrupt},
	}
	for _, s := range servers {
		for _, tt := range []struct {
			name                string
			take                func(testing.TB) string
			sharedOK, exclusive bool
		}{
			{"use", s.use, true, false},
			{"disrupt", s.disrupt, false, false},
		} {
			t.Run(s.name+"/"+tt.name, func(t *testing.T) {
				if u := tt.take(t); u != s.url() {
					t.Fatalf("URL %q, want %q", u, s.url())
				}
				if got := tryLock(t, s.file, syscall.LOCK_SH); got != tt.sharedOK {
					t.Errorf("shared lock while held: %v, want %v", got, tt.sharedOK)
				}
				if got := tryLock(t, s.file, syscall.LOCK_EX); got != tt.exclusive {
					t.Errorf("exclusive lock while held: %v, want %v", got, tt.exclusive)
				}
			})
			// The subtest's cleanup let it go.
			if !tryLock(t, s.file, syscall.LOCK_EX) {
				t.Errorf("%s/%s: lock still held after the test ended", s.name, tt.name)
			}
		}
	}
}

// named is a test of another name, to take the lock as several tests do.
type named struct {
	testing.TB
	name string
}

func (n named) Name() string { return n.name }

// TestDisruptGoesBeforeLaterSharedTakers: a disruptive test that waits
// for a shared holder gets the lock before a shared taker that comes
// after it, which waits at the gate; a subtest of a holder passes the gate.
func TestDisruptGoesBeforeLaterSharedTakers(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // lock files no other test process sees
	s := &testlock.Server{Name: "gated", LockFile: "gated.lock", GateFile: "gated.gate"}
	// A shared holder, as another package's test would be.
	first := s.Lock(named{t, "First"}, syscall.LOCK_SH)
	disrupted := make(chan func())
	go func() { disrupted <- s.Lock(named{t, "Disruptive"}, syscall.LOCK_EX) }()
	// The disruptive test waits at the lock, holding the gate.
	testbound.Until(t, "the disruptive test holding the gate", func() bool { return !tryLock(t, s.GateFile, syscall.LOCK_SH) })
	later := make(chan func())
	go func() { later <- s.Lock(named{t, "Later"}, syscall.LOCK_SH) }()
	// A subtest of the holder does not wait at the gate: the disruptive
	// test waits for its parent, which waits for it.
	s.Lock(named{t, "First/step"}, syscall.LOCK_SH)()
	select {
	case <-later:
		t.Fatal("a shared taker got in before the disruptive test waiting for the lock")
	case <-time.After(200 * time.Millisecond): // four rounds of the lock's polling
	}
	first()
	release := <-disrupted
	select {
	case <-later:
		t.Fatal("a shared taker got the lock while the disruptive test held it")
	default:
	}
	if tryLock(t, s.LockFile, syscall.LOCK_SH) {
		t.Fatal("the lock is free for a shared taker while the disruptive test holds it")
	}
	release()
	(<-later)()
	if !tryLock(t, s.LockFile, syscall.LOCK_EX) {
		t.Error("lock still held after every taker let it go")
	}
}
