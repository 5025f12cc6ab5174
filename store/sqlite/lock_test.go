package sqlite

import (
	"path/filepath"
	"syscall"
	"testing"
)

// A copy of the lock's descriptor, as a child process holds between fork
// and exec, must not keep the store locked after unlock.
func TestUnlockReleasesEveryCopy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "captchaq.db")
	l, err := lockStore(path)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := syscall.Dup(int(l.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dup)
	if err := l.unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := lockStore(path)
	if err != nil {
		t.Fatalf("lock after unlock, with a copy of the old descriptor still open: %v", err)
	}
	if err := l2.unlock(); err != nil {
		t.Fatal(err)
	}
}
