package postgres_test

import (
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/store/postgres"
	"github.com/captchaq/captchaq/storetest"
)

// Each subtest gets a database of its own. The suite's tasks finished in
// March 2026; the prune loop must not race its own Prune, so it is off.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) captchaq.Store {
		s, err := postgres.Open(t.Context(), pgtest.NewDatabase(t), postgres.Config{Retention: postgres.RetentionOff})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
