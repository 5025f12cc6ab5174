package captchaq_test

import (
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		return captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	})
}
