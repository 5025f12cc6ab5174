package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

// The store's files hold tasks with their proxies' passwords: each is
// created for its owner alone (0600), the WAL and its index too.
func TestStoreFilesAreOwnerOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "captchaq.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task := captchaq.Task{ID: "t1", Method: "turnstile", Proxy: "user:hunter2@10.0.0.1:8080", ProxyType: "HTTP",
		Params: map[string]string{"sitekey": "0x4AAAAAAA", "pageurl": "https://a.example/"}}
	if _, _, err := s.Enqueue(ctx, []captchaq.Task{task}, time.Now()); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		seen[e.Name()] = true
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s: mode %v, want no group or other bits (0600)", e.Name(), perm)
		}
	}
	for _, name := range []string{"captchaq.db", "captchaq.db-wal", "captchaq.db-shm"} {
		if !seen[name] {
			t.Errorf("%s: not there (the files: %v)", name, seen)
		}
	}
}
