package startstop

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
)

// TestStartStop: Start runs the function once however often it is called,
// Stop waits for it to return, and the Loop starts again after Stop.
func TestStartStop(t *testing.T) {
	t.Parallel()
	var runs, running atomic.Int32
	entered := make(chan struct{}, 10)
	l := New(func(ctx context.Context) {
		runs.Add(1)
		if running.Add(1) != 1 {
			t.Error("two runs at once")
		}
		entered <- struct{}{}
		<-ctx.Done()
		running.Add(-1)
	})
	l.Stop() // not started: returns at once
	for i := range 3 {
		if err := l.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := l.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-entered
		l.Stop()
		if n := running.Load(); n != 0 {
			t.Fatalf("after Stop: %d runs still running", n)
		}
		l.Stop()
		if n := runs.Load(); n != int32(i+1) {
			t.Fatalf("after %d Start/Stop: %d runs, want %d", i+1, n, i+1)
		}
	}
}

// TestStartEndedContext: a Loop is not started on an ended context, and a
// run ends with the context it was started on.
func TestStartEndedContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	l := New(func(ctx context.Context) { t.Error("ran on an ended context") })
	if err := l.Start(ctx); err != context.Canceled {
		t.Errorf("Start: %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan struct{})
	l = New(func(ctx context.Context) { <-ctx.Done(); close(done) })
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	l.Stop()
	// The run ended by itself: Start runs it again.
	done = make(chan struct{})
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	l.Stop()
	<-done
}

// TestConcurrentStartStop: Start and Stop called from many goroutines at
// once never run two copies of the function and never leave it running
// after the last Stop.
func TestConcurrentStartStop(t *testing.T) {
	t.Parallel()
	var running atomic.Int32
	l := New(func(ctx context.Context) {
		if running.Add(1) != 1 {
			t.Error("two runs at once")
		}
		<-ctx.Done()
		running.Add(-1)
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				_ = l.Start(t.Context())
				l.Stop()
			}
		})
	}
	wg.Wait()
	l.Stop()
	if n := running.Load(); n != 0 {
		t.Errorf("after the last Stop: %d runs", n)
	}
}

// TestEvery: f runs at once, then once a period, and Every returns when
// its context ends.
func TestEvery(t *testing.T) {
	calls := callTimes(t, Every, 0, 3500*time.Millisecond)
	want := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls at %v, want %v", calls, want)
	}
}

// TestTick: f runs once a period, the first time a period after the
// start, and Tick returns when its context ends.
func TestTick(t *testing.T) {
	calls := callTimes(t, Tick, 0, 3500*time.Millisecond)
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls at %v, want %v", calls, want)
	}
}

// TestSlowCall: a call that outlasts the period is followed by the next
// at once, then the calls keep the period's beat, with no backlog.
func TestSlowCall(t *testing.T) {
	for name, c := range map[string]struct {
		body periodicBody
		want []time.Duration
	}{
		"Every": {Every, []time.Duration{0, 2500 * time.Millisecond, 3 * time.Second, 4 * time.Second, 5 * time.Second}},
		"Tick":  {Tick, []time.Duration{time.Second, 3500 * time.Millisecond, 4 * time.Second, 5 * time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			calls := callTimes(t, c.body, 2500*time.Millisecond, 5500*time.Millisecond)
			if !slices.Equal(calls, c.want) {
				t.Fatalf("calls at %v, want %v", calls, c.want)
			}
		})
	}
}

type periodicBody = func(context.Context, time.Duration, func(context.Context))

// callTimes runs body with a period of 1s for runFor in a synctest bubble,
// its first call of f lasting firstCall, and returns when f was called.
func callTimes(t *testing.T, body periodicBody, firstCall, runFor time.Duration) []time.Duration {
	t.Helper()
	var calls []time.Duration
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			body(ctx, time.Second, func(context.Context) {
				calls = append(calls, time.Since(start))
				if len(calls) == 1 {
					time.Sleep(firstCall) // the fault: a slow call, in fake time
				}
			})
		}()
		testbound.Advance(runFor)
		cancel()
		<-done
	})
	return calls
}

// TestPool: Go runs every function, never more than n at once, and the
// n+1st waits for a slot; Wait returns once all have returned.
func TestPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		p := NewPool(n)
		var running, ran atomic.Int32
		release := make(chan struct{})
		for range n {
			p.Go(func() {
				running.Add(1)
				<-release
				running.Add(-1)
				ran.Add(1)
			})
		}
		fourth := make(chan struct{})
		go func() {
			p.Go(func() { ran.Add(1) })
			close(fourth)
		}()
		synctest.Wait()
		select {
		case <-fourth:
			t.Fatal("a fourth function started while three ran on a Pool of 3")
		default:
		}
		if r := running.Load(); r != n {
			t.Fatalf("%d running, want %d", r, n)
		}
		close(release)
		<-fourth
		p.Wait()
		if ran.Load() != n+1 || running.Load() != 0 {
			t.Errorf("ran %d (%d still running), want %d, 0", ran.Load(), running.Load(), n+1)
		}
	})
}

// TestPoolGoCtx: GoCtx runs f while ctx lives, gives up waiting for a slot
// when ctx ends, and starts nothing on an ended ctx even with a free slot.
func TestPoolGoCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(1)
		ctx, cancel := context.WithCancel(t.Context())
		release := make(chan struct{})
		if !p.GoCtx(ctx, func() { <-release }) {
			t.Fatal("GoCtx on a live ctx with a free slot ran nothing")
		}
		gaveUp := make(chan bool)
		go func() { gaveUp <- !p.GoCtx(ctx, func() { t.Error("ran after its ctx ended") }) }()
		synctest.Wait()
		cancel()
		if !<-gaveUp {
			t.Error("GoCtx waiting for a slot did not give up when ctx ended")
		}
		close(release)
		p.Wait()
		if p.GoCtx(ctx, func() { t.Error("ran on an ended ctx") }) {
			t.Error("GoCtx on an ended ctx returned true")
		}
		p.Wait()
	})
}
