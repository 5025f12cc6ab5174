package storetest_test

import (
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/storetest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		return captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	})
}

// A store with a bound on final tasks still passes while under it.
func TestMemoryStoreBounded(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		return captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{MaxFinished: 400})
	})
}
