package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
	"github.com/captchaq/captchaq/storetest"
)

func openTemp(t *testing.T, opts sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "captchaq.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The suite's tasks finished in March 2026; the prune loop must not race
// its own Prune, so it is off.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		return openTemp(t, sqlite.Config{Retention: sqlite.RetentionOff})
	})
}

func TestConformanceSynchronousFull(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		return openTemp(t, sqlite.Config{Synchronous: sqlite.SynchronousFull, MaxBatch: 3, Retention: sqlite.RetentionOff})
	})
}
