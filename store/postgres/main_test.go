package postgres

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Close stops every goroutine a Store starts (the
// prune loop) and the pool's own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
