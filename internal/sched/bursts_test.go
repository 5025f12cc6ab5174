package sched

import (
	"testing"
	"time"
)

// Tasks accepted within BurstWindow of a burst's first task share its
// number; the first one later starts the next burst.
func TestBurstsNumberArrivals(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b Bursts
	for _, c := range []struct {
		at   time.Duration
		want int64
	}{{0, 1}, {BurstWindow / 2, 1}, {BurstWindow, 1}, {BurstWindow + time.Millisecond, 2}, {2 * BurstWindow, 2}, {3 * BurstWindow, 3}} {
		if got := b.Of(t0.Add(c.at)); got != c.want {
			t.Errorf("Of(t0+%v) = %d, want %d", c.at, got, c.want)
		}
	}
}
