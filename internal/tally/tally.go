// Package tally counts final results and tasks waiting, and derives the
// numbers a captchaq.Metrics snapshot reports from them, for the queue and
// for a gateway that learns of results from a fleet. Results and Waiting
// are not safe for concurrent use: their owner guards them. Counters, a
// queue's counts, guard themselves.
package tally

import (
	"time"

	"github.com/captchaq/captchaq/internal/latency"
)

// delaySamples is how many delivery delays the quantiles cover.
const delaySamples = 1024

// Results counts final results since Started. The zero value is ready
// to use.
type Results struct {
	Started        time.Time
	Solved, Failed int64
	solveSum       float64
	delays         *latency.Window
}

// NewResults returns counts that start at started.
func NewResults(started time.Time) Results {
	return Results{Started: started, delays: latency.NewWindow(delaySamples)}
}

// Add counts one result. solveSeconds counts toward the average of solved
// ones; a delay, when timed, is how long the answer waited to be
// delivered (negative counts as zero).
func (r *Results) Add(solved bool, solveSeconds float64, delay time.Duration, timed bool) {
	if !solved {
		r.Failed++
		return
	}
	r.Solved++
	r.solveSum += solveSeconds
	if timed {
		if r.delays == nil {
			r.delays = latency.NewWindow(delaySamples)
		}
		r.delays.Add(max(delay, 0))
	}
}

// Rates are the numbers derived from Results at one moment.
type Rates struct {
	AvgSolveSeconds, SuccessRate, ThroughputPerMin float64
	DelayP50, DelayP99                             float64 // seconds
}

// Rates derives the rates at now.
func (r *Results) Rates(now time.Time) Rates {
	var out Rates
	if r.Solved > 0 {
		out.AvgSolveSeconds = r.solveSum / float64(r.Solved)
	}
	if done := r.Solved + r.Failed; done > 0 {
		out.SuccessRate = float64(r.Solved) / float64(done)
	}
	if !r.Started.IsZero() {
		if mins := now.Sub(r.Started).Minutes(); mins > 0 {
			out.ThroughputPerMin = float64(r.Solved) / mins
		}
	}
	if r.delays != nil {
		out.DelayP50 = r.delays.Quantile(0.5).Seconds()
		out.DelayP99 = r.delays.Quantile(0.99).Seconds()
	}
	return out
}

// Waiting counts tasks waiting by priority and finds the oldest.
type Waiting struct {
	ByPriority map[int]int
	oldest     time.Time
}

// NewWaiting returns empty counts.
func NewWaiting() Waiting { return Waiting{ByPriority: map[int]int{}} }

// Add counts one task of priority, waiting since since.
func (w *Waiting) Add(priority int, since time.Time) {
	w.ByPriority[priority]++
	if w.oldest.IsZero() || since.Before(w.oldest) {
		w.oldest = since
	}
}

// OldestSeconds is the longest wait at now, 0 with none.
func (w *Waiting) OldestSeconds(now time.Time) float64 {
	if w.oldest.IsZero() {
		return 0
	}
	return max(now.Sub(w.oldest).Seconds(), 0)
}
