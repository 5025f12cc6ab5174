package sqlite_test

import (
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
	"github.com/captchaq/captchaq/storetest"
)

// The suite's tasks finished in March 2026; the prune loop must not race
// its own Prune, so it is off.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		return sqlite.OpenTemp(t, sqlite.Config{Retention: sqlite.RetentionOff})
	})
}

func TestConformanceSynchronousFull(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		return sqlite.OpenTemp(t, sqlite.Config{Synchronous: sqlite.SynchronousFull, MaxBatch: 3, Retention: sqlite.RetentionOff})
	})
}
