package brokertest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
