// Package testbound bounds the waits of captchaq's tests that have no
// bound of their own: receiving a result, a WaitGroup, a call that takes
// a context. Only a hang reaches the bound; the test then fails, saying
// what it waited for, instead of the go test timeout stopping the whole
// run with a goroutine dump ten minutes later. A state that sends no
// signal (a child process's answer, a broker queue's depth, a
// simulator's count) is polled by Eventually or Until, the one poll loop
// of the tests. Inside a testing/synctest bubble the bound is fake time,
// which a hang spins through in little real time (a bubble's timers keep
// firing while a test waits forever), and Advance steps the fake clock.
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

// PollEvery is how often Eventually checks its condition.
const PollEvery = 20 * time.Millisecond

// Eventually checks cond every PollEvery until it holds, and reports
// whether it did within Bound: for a state that sends no signal. The
// caller fails with what it saw (Until does with a name).
func Eventually(cond func() bool) bool {
	deadline := time.Now().Add(Bound)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(PollEvery)
	}
	return true
}

// Until is Eventually that fails the test, naming what it waited for,
// when cond does not hold within Bound. Call it on the test's goroutine.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Eventually(cond) {
		t.Fatalf("waited %v for %s: never", Bound, what)
	}
}
