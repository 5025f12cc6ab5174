package sqlite

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Close stops every goroutine a Store starts (the
// writer and the prune loop) and database/sql's own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
