package server

import (
	"sync"
	"sync/atomic"
	"testing"
)

// A take refused for want of room leaves the count as it was, even for a
// moment: a take that fits is never refused because another did not.
func TestGaugeRefusalDoesNotCrowdOthers(t *testing.T) {
	t.Parallel()
	var g gauge
	const limit = 100
	if !g.take(90, limit) {
		t.Fatal("first take refused")
	}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() { // never fits
			defer wg.Done()
			for range 20000 {
				if g.take(20, limit) {
					t.Error("a take past the limit was granted")
					return
				}
			}
		}()
		go func() { // always fits: 90 + 10 = 100, one at a time per goroutine
			defer wg.Done()
			for range 20000 {
				if g.take(0, limit) {
					g.give(0)
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Errorf("%d takes that fit were refused", n)
	}
}
