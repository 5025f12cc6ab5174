package brokertest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// tryLock reports whether the lock file can be taken with how right now,
// through a file of its own (as another process would), and lets it go.
func tryLock(t *testing.T, how int) bool {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), LockFile), os.O_CREATE|os.O_RDWR, 0o666)
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

func TestUseSharesAndDisruptExcludes(t *testing.T) {
	// Hold the real lock shared for the whole test, so no other test
	// process restarts the broker while this one checks it is reachable.
	Use(t)
	t.Setenv("TMPDIR", t.TempDir()) // a lock file no other test process sees
	tests := []struct {
		name                string
		take                func(testing.TB) string
		sharedOK, exclusive bool
	}{
		{"use", Use, true, false},
		{"disrupt", Disrupt, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if u := tt.take(t); u != URL() {
				t.Fatalf("URL %q, want %q", u, URL())
			}
			if got := tryLock(t, syscall.LOCK_SH); got != tt.sharedOK {
				t.Errorf("shared lock while held: %v, want %v", got, tt.sharedOK)
			}
			if got := tryLock(t, syscall.LOCK_EX); got != tt.exclusive {
				t.Errorf("exclusive lock while held: %v, want %v", got, tt.exclusive)
			}
		})
		// The subtest's cleanup let it go.
		if !tryLock(t, syscall.LOCK_EX) {
			t.Errorf("%s: lock still held after the test ended", tt.name)
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
	t.Setenv("TMPDIR", t.TempDir()) // a lock file no other test process sees
	// A shared holder, as another package's test would be.
	first := lock(named{t, "First"}, syscall.LOCK_SH)
	disrupted := make(chan func())
	go func() { disrupted <- lock(named{t, "Disruptive"}, syscall.LOCK_EX) }()
	// The disruptive test waits at the lock, holding the gate.
	for {
		g, err := os.OpenFile(filepath.Join(os.TempDir(), GateFile), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(g.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		g.Close()
		if err == syscall.EWOULDBLOCK {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	later := make(chan func())
	go func() { later <- lock(named{t, "Later"}, syscall.LOCK_SH) }()
	// A subtest of the holder does not wait at the gate: the disruptive
	// test waits for its parent, which waits for it.
	lock(named{t, "First/step"}, syscall.LOCK_SH)()
	select {
	case <-later:
		t.Fatal("a shared taker got in before the disruptive test waiting for the lock")
	case <-time.After(200 * time.Millisecond): // four rounds of lockFile's polling
	}
	first()
	release := <-disrupted
	select {
	case <-later:
		t.Fatal("a shared taker got the lock while the disruptive test held it")
	default:
	}
	if tryLock(t, syscall.LOCK_SH) {
		t.Fatal("the lock is free for a shared taker while the disruptive test holds it")
	}
	release()
	(<-later)()
	if !tryLock(t, syscall.LOCK_EX) {
		t.Error("lock still held after every taker let it go")
	}
}
