package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrInUse is matched (errors.Is) by the error Open returns when another
// process, or another Open in this one, holds the store.
var ErrInUse = errors.New("store is in use")

// InUseError says which process holds a store.
type InUseError struct {
	Path string
	// PID is the holder's process id as it wrote it in the lock file; 0
	// when unknown.
	PID int
}

func (e *InUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("store %s is in use by another captchaq process; stop it or choose another path", e.Path)
	}
	return fmt.Sprintf("store %s is in use by another captchaq process (pid %d); stop it or choose another path", e.Path, e.PID)
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// fileLock is an exclusive flock on PATH.lock, held while the store is open.
// The kernel drops it when the process dies, so a killed process never
// leaves a stale lock. The file is never removed: removing it would let a
// third process lock a new file while a second still holds the old one.
type fileLock struct {
	f *os.File
}

func lockStore(path string) (*fileLock, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store %s: open lock file: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			buf := make([]byte, 32)
			n, _ := f.ReadAt(buf, 0)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
			return nil, &InUseError{Path: path, PID: pid}
		}
		return nil, fmt.Errorf("store %s: lock %s: %w", path, name, err)
	}
	// The pid is for the message above only; the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &fileLock{f: f}, nil
}

// unlock releases the lock, then closes the file. Closing alone is not
// enough: a child process being started at that moment (fork, before its
// exec closes the inherited descriptors) holds a copy of the descriptor,
// and the flock stays until that copy is gone too. LOCK_UN drops it for
// every copy at once.
func (l *fileLock) unlock() error {
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	return errors.Join(err, l.f.Close())
}
