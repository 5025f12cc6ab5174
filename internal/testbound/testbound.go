// Package testbound bounds the waits of captchaq's tests that have no
// bound of their own: receiving a result, a WaitGroup, a call that takes
// a context. Only a hang reaches the bound; the test then fails, saying
// what it waited for, instead of the go test timeout stopping the whole
// run with a goroutine dump ten minutes later. Inside a testing/synctest
// bubble the bound is fake time, which a hang spins through in little
// real time (a bubble's timers keep firing while a test waits forever).
package testbound

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Bound is how long a wait may take before it counts as a hang: far past
// any test's legitimate wait, on the slowest machine.
const Bound = 2 * time.Minute

// Context is t's context, ended Bound from now.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), Bound)
	t.Cleanup(cancel)
	return ctx
}

// Receive returns the next value from c, failing the test if none comes
// within Bound. Call it on the test's goroutine.
func Receive[T any](t testing.TB, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(Bound):
		t.Fatalf("waited %v for %s: hung", Bound, what)
		var zero T
		return zero
	}
}

// WaitGroup waits for wg, failing the test if it is not done within
// Bound. Call it on the test's goroutine.
func WaitGroup(t testing.TB, what string, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	Receive(t, what, done)
}
