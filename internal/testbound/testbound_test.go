package testbound

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fatalRecorder is a test whose Fatalf is recorded: it ends the calling
// goroutine, as testing's does, without failing the real test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f on a goroutine of its own, as a test body, and returns the
// message it failed with ("" if none) and the fake time it took.
func run(t *testing.T, f func(tb testing.TB)) (msg string, took time.Duration) {
	r := &fatalRecorder{TB: t}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg, time.Since(start)
}

// Each wait that never ends fails at Bound, saying what it waited for;
// one that ends returns at once. The clock is synctest's.
func TestBoundedWaits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		msg, took := run(t, func(tb testing.TB) { Receive(tb, "the answer", make(chan int)) })
		if msg != "waited 2m0s for the answer: hung" || took != Bound {
			t.Errorf("Receive on a silent channel: failed %q after %v; want the hang named after %v", msg, took, Bound)
		}
		c := make(chan int, 1)
		c <- 7
		var got int
		msg, took = run(t, func(tb testing.TB) { got = Receive(tb, "the answer", c) })
		if msg != "" || took != 0 || got != 7 {
			t.Errorf("Receive of a sent value: %d, failed %q after %v; want 7 at once", got, msg, took)
		}

		var wg sync.WaitGroup
		wg.Add(1)
		msg, took = run(t, func(tb testing.TB) { WaitGroup(tb, "the workers", &wg) })
		if msg != "waited 2m0s for the workers: hung" || took != Bound {
			t.Errorf("WaitGroup never done: failed %q after %v; want the hang named after %v", msg, took, Bound)
		}
		wg.Done() // lets WaitGroup's goroutine end with the bubble

		msg, took = run(t, func(tb testing.TB) { Until(tb, "a count of 3", func() bool { return false }) })
		if msg != "waited 2m0s for a count of 3: never" || took < Bound || took > Bound+PollEvery {
			t.Errorf("Until of a condition that never holds: failed %q after %v; want it named after %v", msg, took, Bound)
		}
		n := 0
		msg, took = run(t, func(tb testing.TB) { Until(tb, "a count of 3", func() bool { n++; return n == 3 }) })
		if msg != "" || took != 2*PollEvery || n != 3 {
			t.Errorf("Until of a condition true on the third check: failed %q after %v, %d checks; want none after %v and 3", msg, took, n, 2*PollEvery)
		}

		msg, took = run(t, func(tb testing.TB) { <-Context(tb).Done() })
		if msg != "" || took != Bound {
			t.Errorf("Context ended after %v (failed %q), want %v", took, msg, Bound)
		}
	})
}

// Advance moves the fake clock by exactly its duration and returns once
// what the move set off has run; outside a bubble it refuses to sleep.
func TestAdvance(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fired := make(chan time.Duration, 2)
		time.AfterFunc(time.Hour, func() { fired <- time.Since(start) })
		time.AfterFunc(time.Hour+time.Nanosecond, func() { fired <- time.Since(start) })
		Advance(time.Hour)
		if took := time.Since(start); took != time.Hour || len(fired) != 1 || <-fired != time.Hour {
			t.Errorf("after Advance(1h): %v passed, %d timers ran; want 1h and the 1h timer only", took, len(fired))
		}
	})
	defer func() {
		if recover() == nil {
			t.Error("Advance outside a bubble returned; want a panic")
		}
	}()
	Advance(time.Hour)
}
