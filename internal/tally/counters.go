package tally

import (
	"maps"
	"sync"
	"time"
)

// Counters are a queue's counts: tasks accepted, renewed, taken over from
// the Store, retried by reason, and their final results. Unlike the other
// types here they guard themselves, under a lock that is a leaf: safe for
// concurrent use, and for a caller holding a lock of its own.
type Counters struct {
	mu                                           sync.Mutex
	results                                      Results
	submitted, renewed, resumed, resumedInFlight int64
	retries                                      int64
	retriesBy                                    map[string]int64
}

// NewCounters returns counts at zero; Start dates them.
func NewCounters() *Counters {
	return &Counters{results: NewResults(time.Time{}), retriesBy: map[string]int64{}}
}

// Start sets when the counting started (for the throughput).
func (c *Counters) Start(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results.Started = at
}

// Submitted counts a task accepted.
func (c *Counters) Submitted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.submitted++
}

// Renewed counts n known tasks whose expired token is solved again.
func (c *Counters) Renewed(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.renewed += int64(n)
}

// Resumed counts an unfinished task taken over from the Store; inFlight:
// it is polled by its stored captcha id.
func (c *Counters) Resumed(inFlight bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resumed++
	if inFlight {
		c.resumedInFlight++
	}
}

// Retry counts an attempt that went back to the queue, by its code
// (UNKNOWN when empty).
func (c *Counters) Retry(code string) {
	if code == "" {
		code = "UNKNOWN"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retries++
	c.retriesBy[code]++
}

// Result counts a final result, as Results.Add; the delivery delay is
// delivered - ready, timed only when ready is set.
func (c *Counters) Result(solved bool, solveSeconds float64, ready, delivered time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results.Add(solved, solveSeconds, delivered.Sub(ready), !ready.IsZero())
}

// Counts are Counters read at one moment.
type Counts struct {
	Started                            time.Time
	Submitted, Solved, Failed, Renewed int64
	Resumed, ResumedInFlight, Retries  int64
	RetriesByReason                    map[string]int64 // a copy
	Rates
}

// Counts reads the counters and their rates at now.
func (c *Counters) Counts(now time.Time) Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Counts{
		Started: c.results.Started, Submitted: c.submitted, Solved: c.results.Solved, Failed: c.results.Failed,
		Renewed: c.renewed, Resumed: c.resumed, ResumedInFlight: c.resumedInFlight, Retries: c.retries,
		RetriesByReason: maps.Clone(c.retriesBy), Rates: c.results.Rates(now),
	}
}
