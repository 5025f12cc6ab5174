package testbound

import (
	"testing/synctest"
	"time"
)

// Advance moves a testing/synctest bubble's fake clock on by d and
// returns when the bubble has settled: every other goroutine in it is
// durably blocked again, so what d set off has run. It is how a test in
// a bubble steps through time; no real time passes. It panics when
// called outside a bubble, where the same sleep would be a real wait.
// Call it on the test's goroutine.
func Advance(d time.Duration) {
	synctest.Wait() // panics outside a bubble; inside, time moves only once all block anyway
	time.Sleep(d)
	synctest.Wait()
}
