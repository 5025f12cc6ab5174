package tally

import (
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestResultsRates(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var zero Results
	if got := zero.Rates(start); got != (Rates{}) {
		t.Fatalf("zero value rates %+v, want all zero", got)
	}
	r := NewResults(start)
	r.Add(true, 10, 200*time.Millisecond, true)
	r.Add(true, 20, -time.Second, true) // a clock behind counts as no delay
	r.Add(true, 30, 400*time.Millisecond, true)
	r.Add(true, 40, time.Hour, false) // untimed: no delay sample
	r.Add(false, 99, time.Hour, true) // failures count, without time or delay
	// Delays 0, 0.2 and 0.4 s: nearest rank gives the middle one for both.
	want := Rates{AvgSolveSeconds: 25, SuccessRate: 0.8, ThroughputPerMin: 2, DelayP50: 0.2, DelayP99: 0.2}
	if got := r.Rates(start.Add(2 * time.Minute)); got != want {
		t.Errorf("rates %+v, want %+v", got, want)
	}
	if r.Solved != 4 || r.Failed != 1 {
		t.Errorf("solved %d failed %d, want 4 and 1", r.Solved, r.Failed)
	}
}

func TestWaiting(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	w := NewWaiting()
	if w.OldestSeconds(now) != 0 {
		t.Fatal("empty: oldest not 0")
	}
	w.Add(5, now.Add(-3*time.Second))
	w.Add(1, now.Add(-7*time.Second))
	w.Add(5, now.Add(-1*time.Second))
	if w.ByPriority[5] != 2 || w.ByPriority[1] != 1 || len(w.ByPriority) != 2 {
		t.Errorf("by priority %v, want 5:2 1:1", w.ByPriority)
	}
	if got := w.OldestSeconds(now); got != 7 {
		t.Errorf("oldest %v s, want 7", got)
	}
}

// Counters count what a queue reports, each call from any goroutine;
// Counts is a copy (changing its map changes no count).
func TestCounters(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	c := NewCounters()
	c.Start(start)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c.Submitted()
			c.Retry("ERROR_NO_SLOT_AVAILABLE")
		})
	}
	wg.Wait()
	c.Retry("")
	c.Renewed(2)
	c.Resumed(true)
	c.Resumed(false)
	c.Result(true, 10, start.Add(time.Second), start.Add(1200*time.Millisecond))
	c.Result(true, 20, time.Time{}, start.Add(time.Minute)) // not timed
	c.Result(false, 0, time.Time{}, start)
	got := c.Counts(start.Add(time.Minute))
	want := Counts{
		Started: start, Submitted: 4, Solved: 2, Failed: 1, Renewed: 2, Resumed: 2, ResumedInFlight: 1, Retries: 5,
		RetriesByReason: map[string]int64{"ERROR_NO_SLOT_AVAILABLE": 4, "UNKNOWN": 1},
		Rates:           Rates{AvgSolveSeconds: 15, SuccessRate: 2.0 / 3, ThroughputPerMin: 2, DelayP50: 0.2, DelayP99: 0.2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counts %+v\nwant %+v", got, want)
	}
	got.RetriesByReason["UNKNOWN"] = 99
	if c.Counts(start).RetriesByReason["UNKNOWN"] != 1 {
		t.Error("changing a snapshot's map changed the counters")
	}
}
