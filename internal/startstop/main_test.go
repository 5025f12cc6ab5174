package startstop

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that every Stop left no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
