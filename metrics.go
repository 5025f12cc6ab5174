package captchaq

import (
	"maps"
	"time"

	"github.com/captchaq/captchaq/internal/latency"
	"github.com/captchaq/captchaq/internal/sched"
)

// Metrics is a snapshot of the queue's counters and state.
type Metrics struct {
	// Submitted counts tasks accepted into the queue; Solved and Failed
	// their final results; Retries the attempts that went back to the
	// queue, by the provider's code (or NETWORK) in RetriesByReason.
	Submitted, Solved, Failed, Retries int64
	RetriesByReason                    map[string]int64
	// AvgSolveSeconds is over solved tasks; SuccessRate is Solved over
	// Solved+Failed; ThroughputPerMin is solved tasks per minute since
	// Start.
	AvgSolveSeconds, SuccessRate, ThroughputPerMin float64
	// ThreadsInUse are slots taken (tasks at the provider or being
	// submitted); Window is the AIMD window (Threads unless the provider
	// said no free thread lately); Threads is the plan's.
	ThreadsInUse, Window, Threads int
	// QueueDepth counts tasks waiting for a thread, by priority in
	// DepthByPriority; OldestWaitingSeconds is the longest wait among them.
	QueueDepth           int
	DepthByPriority      map[int]int
	OldestWaitingSeconds float64
	// Requests counts HTTP requests to the provider, when the Provider
	// reports them (interface{ Requests() int64 }).
	Requests          int64
	RequestsPerSolved float64
	// DeliveryDelayP50 and P99 estimate, in seconds, how long answers sat
	// ready at the provider before delivery (over the last 1024).
	DeliveryDelayP50, DeliveryDelayP99 float64
	// Paused is true while an account error stops all sending.
	Paused       bool
	PausedReason string
	StartedAt    time.Time
}

const delaySamples = 1024

type counters struct {
	startedAt                          time.Time
	submitted, solved, failed, retries int64
	retriesBy                          map[string]int64
	solveSum                           float64
	delays                             *latency.Window
}

func (c *counters) init() {
	c.retriesBy = map[string]int64{}
	c.delays = latency.NewWindow(delaySamples)
}

func (c *counters) retry(code string) {
	if code == "" {
		code = "UNKNOWN"
	}
	c.retries++
	c.retriesBy[code]++
}

func (c *counters) record(r Result, ready, delivered time.Time) {
	if r.Status != StatusSolved {
		c.failed++
		return
	}
	c.solved++
	c.solveSum += r.SolveSeconds
	if !ready.IsZero() {
		c.delays.Add(max(delivered.Sub(ready), 0))
	}
}

// Metrics returns a snapshot.
func (q *Queue) Metrics() Metrics {
	now := q.now()
	var reqs int64
	if rc, ok := q.cfg.Provider.(interface{ Requests() int64 }); ok {
		reqs = rc.Requests()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c := &q.metrics
	m := Metrics{
		Submitted: c.submitted, Solved: c.solved, Failed: c.failed, Retries: c.retries,
		RetriesByReason: maps.Clone(c.retriesBy),
		ThreadsInUse:    q.limiter.InUse(), Window: q.limiter.Window(), Threads: q.limiter.Max(),
		QueueDepth: q.queue.Len(), DepthByPriority: map[int]int{},
		Requests: reqs, StartedAt: c.startedAt,
	}
	if c.solved > 0 {
		m.AvgSolveSeconds = c.solveSum / float64(c.solved)
		m.RequestsPerSolved = float64(reqs) / float64(c.solved)
	}
	if done := c.solved + c.failed; done > 0 {
		m.SuccessRate = float64(c.solved) / float64(done)
	}
	if !c.startedAt.IsZero() {
		if mins := now.Sub(c.startedAt).Minutes(); mins > 0 {
			m.ThroughputPerMin = float64(c.solved) / mins
		}
	}
	var oldest time.Time
	q.queue.Each(func(it sched.Item[*taskState]) {
		m.DepthByPriority[it.Priority]++
		if oldest.IsZero() || it.Enqueued.Before(oldest) {
			oldest = it.Enqueued
		}
	})
	if !oldest.IsZero() {
		m.OldestWaitingSeconds = max(now.Sub(oldest).Seconds(), 0)
	}
	m.DeliveryDelayP50 = c.delays.Quantile(0.5).Seconds()
	m.DeliveryDelayP99 = c.delays.Quantile(0.99).Seconds()
	if p := q.pausedLocked(now); p != nil {
		m.Paused, m.PausedReason = true, p.Error()
	}
	return m
}
